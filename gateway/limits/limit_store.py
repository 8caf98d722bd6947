"""The Redis side of limits: admission (admit.lua), concurrency lease renewals (renew.lua) and the
read-only look at what remains (peek.lua), over the keys gateway/limits/plans.py names (one hash
tag per team, gateway/redis/keys.py). Admission is one script call, one round trip; the renewals
of every slot this replica holds are one pipelined round trip."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from gateway.redis import keys as redis_keys
from gateway.redis.breaker import RedisBreaker
from gateway.redis.client import RedisClient
from gateway.redis.scripts import load_script
from gateway.redis.store import FAILURES, RedisStore, maps_itself


class LimitStore(RedisStore):
    """`breaker`: the app's, for the store admission uses; the peek's store has none."""

    def __init__(self, redis: RedisClient, breaker: RedisBreaker | None = None, *, timeout_s: float) -> None:
        super().__init__(redis, breaker=breaker)
        self._admit = load_script(redis, "admit")
        self._peek = load_script(redis, "peek")
        self._renew = load_script(redis, "renew")
        self._timeout_s = timeout_s

    @maps_itself  # a call per request saved (tests/perf/budget.json)
    async def admit(
        self, team: str, request_id: str, limit_keys: list[str], args: Sequence[Any]
    ) -> list[Any]:
        """admit.lua's reply; `limit_keys` (the request's own list) gets the admission marker."""
        limit_keys.append(redis_keys.admission_marker(team, request_id))
        started = time.monotonic()
        try:
            async with asyncio.timeout(self._timeout_s):
                reply: list[Any] = await self._admit(keys=limit_keys, args=args)
        except FAILURES as exc:
            raise self.unavailable("admission", exc, started) from None
        breaker = self.breaker
        if breaker is not None and breaker.in_a_row:  # 0 nearly always: a call saved
            breaker.answered()
        return reply

    async def peek(self, limit_keys: list[str], args: Sequence[Any]) -> list[Any]:
        async with asyncio.timeout(self._timeout_s):
            reply: list[Any] = await self._peek(keys=limit_keys, args=args)
        return reply

    @maps_itself
    async def renew(self, batches: Sequence[tuple[Sequence[str], Sequence[Any]]]) -> None:
        """One renew.lua call per (keys, args), all in one pipelined round trip. Not counted by
        the breaker: a background task's, which the next tick retries (gateway/limits/leases.py)."""
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._renew.run_batch(batches)
        except FAILURES as exc:
            raise self.unavailable("lease renewal", exc, None) from None
