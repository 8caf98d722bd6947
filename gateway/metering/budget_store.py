"""The Redis side of the budget gauge (gateway/metering/budget_gauge.py): the export lease one
replica holds (export_lease.lua, its own hash tag) and the reads of the teams' money counters (the
keys admission charges, gateway/limits/plans.py), one pipelined round trip for all of them."""

from __future__ import annotations

from gateway.redis import keys as redis_keys
from gateway.redis.client import RedisClient
from gateway.redis.scripts import load_script
from gateway.redis.store import RedisStore

LEASE_KEY = f"{redis_keys.PREFIX}:{{budget-export}}:lease"


class BudgetStore(RedisStore):
    def __init__(self, redis: RedisClient, *, lease_key: str = LEASE_KEY) -> None:
        super().__init__(redis)
        self._lease_key = lease_key  # replicas that share a Redis share it
        self._lease = load_script(redis, "export_lease")

    async def hold_lease(self, holder: str, lease_ms: int) -> bool:
        """True when `holder` holds the export lease (taken or renewed for `lease_ms`)."""
        return bool(await self._lease(keys=[self._lease_key], args=[holder, lease_ms]))

    async def spent(self, counter_keys: list[str]) -> list[int]:
        """What each money counter holds (0 where there is none)."""
        if not counter_keys:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for key in counter_keys:
                pipe.get(key)
            return [int(used or 0) for used in await pipe.execute()]
