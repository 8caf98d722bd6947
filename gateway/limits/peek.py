"""What remains of limits right now, read without charging anything: one call of the read-only
gateway/redis/lua/peek.lua over the same Redis keys admission charges (gateway/limits/admission.py),
so what it reports is what the next admission would see."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from redis.exceptions import RedisError

from gateway.errors import ErrorCode, GatewayError
from gateway.limits.admission import Limit, LimitKind
from gateway.redis.client import RedisClient
from gateway.redis.scripts import load_script


@dataclass(frozen=True, slots=True)
class Remaining:
    limit: Limit
    remaining: int  # requests or tokens left now, or free concurrency slots
    in_use: int  # concurrency: requests in flight; budget: tokens spent this period; else 0
    reset_after_s: float  # until a per-minute limit is whole again, or a budget's period ends


class LimitReader:
    def __init__(self, redis: RedisClient, *, timeout_s: float) -> None:
        self._script = load_script(redis, "peek")
        self._timeout_s = timeout_s

    async def remaining(self, limits: Sequence[Limit]) -> list[Remaining]:
        """One round trip for all of `limits` (all of one team: they share its hash tag)."""
        if not limits:
            return []
        args: list[str | int | float] = []
        for limit in limits:
            if limit.kind is LimitKind.CONCURRENCY:
                args += ("c", limit.amount, 0)
            elif limit.kind is LimitKind.BUDGET or limit.kind is LimitKind.MONEY:
                args += ("b", limit.amount, limit.period_s)
            else:
                args += ("g", limit.amount, limit.period_s)
        try:
            async with asyncio.timeout(self._timeout_s):
                reply = await self._script(keys=[limit.redis_key for limit in limits], args=args)
        except (RedisError, TimeoutError):
            raise GatewayError(
                ErrorCode.REDIS_UNAVAILABLE, "The rate limiter is unavailable; try again shortly."
            ) from None
        return [
            Remaining(limit, int(reply[i * 3]), int(reply[i * 3 + 1]), float(reply[i * 3 + 2]))
            for i, limit in enumerate(limits)
        ]
