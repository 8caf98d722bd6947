"""`sluicegate_redis_up` on a cluster: 0 while any primary is gone (its teams are refused), 1 again
once its replica has replaced it."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from prometheus_client import CollectorRegistry

from gateway.config import Settings
from gateway.observability.metrics import Metrics
from gateway.redis.client import close_redis, connect_redis
from gateway.redis.health import watch_redis
from tests.redis_cluster import RedisClusterNodes
from tests.waiting import eventually, wait_until

pytestmark = pytest.mark.cluster


def test_redis_up_is_0_while_a_primary_is_down_and_1_once_it_is_replaced(
    own_redis_cluster: RedisClusterNodes,
) -> None:
    cluster = own_redis_cluster

    async def main() -> None:
        metrics = Metrics(CollectorRegistry())
        metrics.redis_up.set(-1)  # neither answer: proves the watcher wrote it

        def up() -> float | None:
            return metrics.registry.get_sample_value("sluicegate_redis_up")

        redis = connect_redis(Settings(redis_url=cluster.url, redis_timeout_s=0.5))
        task = asyncio.ensure_future(watch_redis(redis, metrics.redis_up, timeout_s=0.5, interval_s=0.05))
        try:
            await eventually(lambda: up() == 1, "up with every primary answering", within=10)
            victim = cluster.primaries()[-1]
            cluster.kill(victim)
            await eventually(lambda: up() == 0, "down with one primary gone", within=10)
            await asyncio.to_thread(wait_until, lambda: cluster.failed(victim), 30, "the victim failed")
            await asyncio.to_thread(cluster.wait_ok)
            await eventually(lambda: up() == 1, "up again once the replica is promoted", within=30)
            assert victim not in cluster.primaries()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await close_redis(redis)

    asyncio.run(main())
