"""The Redis side of token fair share (gateway/routing/vtc.py): one script call, vtc.lua, that
applies a pool's batched updates and, when given candidates, picks the one to serve and charges
it. Every failure trips the app's Redis breaker and is raised for the pool to fall back on its
local copy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from gateway.observability.metrics import Metrics
from gateway.redis import keys
from gateway.redis.breaker import RedisBreaker
from gateway.redis.client import RedisClient
from gateway.redis.scripts import load_script
from gateway.redis.store import RedisStore

# A team counts as backlogged (active) while seen waiting or dispatched within this window; the
# replicas where it waits or has requests in flight say so with heartbeats. (In flight too: a
# correction must land on the counter its charge went to, not on one lifted after the team's
# request outlived the window, or refunding a huge estimate would put the team far below all.)
# Short, because a team that comes back after the window starts at the least counter: the window
# is the most idle time that still earns credit.
ACTIVE_WINDOW_S = 5.0
# Counters of a pool nobody used for this long expire; a correction that comes after is dropped.
KEY_TTL_S = 3600.0

Candidate = tuple[str, int, float]  # team, band, cost


class FairShareStore(RedisStore):
    """The Redis side for every pool of one app."""

    def __init__(
        self,
        redis: RedisClient,
        breaker: RedisBreaker,
        metrics: Metrics,
        *,
        timeout_s: float,
        window_s: float = ACTIVE_WINDOW_S,
        ttl_s: float = KEY_TTL_S,
    ) -> None:
        super().__init__(redis, breaker=breaker)
        self._script = load_script(redis, "vtc")
        self.metrics = metrics
        self.timeout_s = timeout_s
        self.window_s = window_s
        self._head = [str(int(ttl_s * 1000)), str(int(window_s * 1000))]

    async def call(
        self, pool: str, updates: Sequence[tuple[str, str, float]], candidates: Sequence[Candidate]
    ) -> list[Any]:
        args: list[str] = [*self._head, str(len(updates))]
        for kind, team, amount in updates:
            args += (kind, team, repr(float(amount)))
        args.append(str(len(candidates)))
        for team, band, cost in candidates:
            args += (team, str(band), repr(float(cost)))
        async with asyncio.timeout(self.timeout_s):
            reply: list[Any] = await self._script(keys=list(keys.fair_share(pool)), args=args)
        return reply
