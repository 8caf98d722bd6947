"""`sluicegate_redis_up`: Redis as this replica sees it, pinged in the background.

A gauge set only by failing requests would read 1 on an idle replica whose Redis is long gone;
the "Redis down" alert needs a value that is current whether or not traffic flows. On a cluster,
every primary is pinged: one primary gone is every team on its slots refused, which the alert is
for, though the other primaries answer.
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import Gauge
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from gateway.redis.client import RedisClient
from gateway.redis.store import RedisStore

log = logging.getLogger("sluicegate.redis")

PING_INTERVAL_S = 5.0


async def watch_redis(
    redis: RedisClient, up: Gauge, *, timeout_s: float, interval_s: float = PING_INTERVAL_S
) -> None:
    was_up: bool | None = None
    while True:
        try:
            async with asyncio.timeout(timeout_s):
                await _ping(redis)
            is_up = True
        except (RedisError, TimeoutError, OSError):
            is_up = False
        up.set(1 if is_up else 0)
        if was_up is not None and is_up != was_up:
            log.log(
                logging.INFO if is_up else logging.WARNING,
                "redis %s",
                "is back" if is_up else "is unreachable",
            )
        was_up = is_up
        await asyncio.sleep(interval_s)


async def _ping(redis: RedisClient) -> None:
    if isinstance(redis, RedisCluster):
        # Fails if any primary does; after a failover the client's next call reads the new slot
        # map, so the replaced primary stops counting.
        await redis.ping(target_nodes=RedisCluster.PRIMARIES)
    else:
        await redis.ping()


class Readiness(RedisStore):
    """/readyz's question: does Redis answer a PING now (bounded by the caller)?"""

    async def ping(self) -> None:
        await self.redis.ping()
