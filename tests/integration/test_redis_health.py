"""`sluicegate_redis_up` follows Redis whether or not requests flow."""

from __future__ import annotations

import asyncio
import contextlib

from prometheus_client import CollectorRegistry

from gateway.config import Settings
from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.observability.metrics import Metrics
from gateway.redis.client import close_redis, connect_redis
from gateway.redis.health import watch_redis
from tests.servers import free_port


async def _gauge_after_pings(url: str) -> float:
    metrics = Metrics(CollectorRegistry())
    metrics.redis_up.set(-1)  # neither answer: proves the watcher wrote it
    redis = connect_redis(Settings(redis_url=url, redis_timeout_s=0.5))
    task = asyncio.ensure_future(watch_redis(redis, metrics.redis_up, timeout_s=0.5, interval_s=0.05))
    await asyncio.sleep(0.3)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await close_redis(redis)
    value = metrics.registry.get_sample_value("sluicegate_redis_up")
    assert value is not None
    return value


def test_redis_up_is_1_with_redis_and_0_without(redis_server: EmbeddedRedis) -> None:
    assert asyncio.run(_gauge_after_pings(redis_server.url)) == 1
    assert asyncio.run(_gauge_after_pings(f"redis://127.0.0.1:{free_port()}/0")) == 0
