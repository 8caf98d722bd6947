"""Metering against a real Redis: one record per request id, reported per team/key/model/day."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from redis.asyncio import Redis

from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.metering.meter import Meter
from gateway.metering.record import UsageRecord
from gateway.metering.usage_store import UsageStore
from gateway.observability.metrics import Metrics
from gateway.redis.client import close_redis
from tests.redis_cluster import RedisServer, async_client

pytestmark = pytest.mark.also_on_cluster


def _record(request_id: str, day: str, model: str = "m", prompt: int = 3, completion: int = 5) -> UsageRecord:
    return UsageRecord(
        request_id=request_id,
        team="meter-team",
        key_id="key_1",
        model=model,
        prompt_tokens=prompt,
        completion_tokens=completion,
        error=False,
        disconnected=request_id.endswith("-gone"),
        day=day,
    )


def test_a_request_is_recorded_once_and_reported_by_day(redis_server: RedisServer) -> None:
    async def scenario() -> tuple[list[bool], list[dict[str, object]], list[dict[str, object]]]:
        redis = async_client(redis_server.url)
        try:
            meter = Meter(UsageStore(redis, timeout_s=2), Metrics())
            written = [
                await meter.record(_record("r1", "2026-11-20")),
                await meter.record(_record("r1", "2026-11-20")),  # a retried write
                await meter.record(_record("r2-gone", "2026-11-21", completion=2)),
                await meter.record(_record("r3", "2026-11-21", model="other")),
            ]
            everything = await meter.report(["meter-team"], None, None)
            one_day = await meter.report(["meter-team"], dt.date(2026, 11, 21), dt.date(2026, 11, 21))
            return written, everything, one_day
        finally:
            await close_redis(redis)

    written, everything, one_day = asyncio.run(scenario())
    assert written == [True, False, True, True]
    assert [(r["day"], r["model"], r["requests"], r["completion_tokens"]) for r in everything] == [
        ("2026-11-20", "m", 1, 5),
        ("2026-11-21", "m", 1, 2),
        ("2026-11-21", "other", 1, 5),
    ]
    assert everything[1]["disconnects"] == 1
    assert everything[1]["total_tokens"] == 5
    assert [r["day"] for r in one_day] == ["2026-11-21", "2026-11-21"]


def _commands(info: dict[str, dict[str, int]], name: str) -> int:
    return int(info.get(f"cmdstat_{name}", {}).get("calls", 0))


def test_a_batch_is_one_round_trip_and_survives_a_redis_that_lost_the_script() -> None:
    """No SCRIPT EXISTS before each batch (a third Redis command per request); a Redis that lost
    the script (restart, failover, SCRIPT FLUSH) still gets every record, each counted once."""

    async def scenario() -> tuple[int, int, int, list[dict[str, object]]]:
        with EmbeddedRedis() as server:  # its own: SCRIPT FLUSH must not touch other tests' Redis
            redis = Redis.from_url(server.url)
            try:
                meter = Meter(UsageStore(redis, timeout_s=2), Metrics())
                for i in range(5):
                    meter.submit(_record(f"b{i}", "2026-11-22"))
                    assert await meter.flush()
                before = await redis.info("commandstats")
                await redis.script_flush()
                for i in range(5, 10):
                    meter.submit(_record(f"b{i}", "2026-11-22"))
                meter.submit(_record("b0", "2026-11-22"))  # already written: counted once
                assert await meter.flush()
                after = await redis.info("commandstats")
                rows = await meter.report(["meter-team"], None, None)
                return (
                    _commands(before, "script|exists") + _commands(after, "script|exists"),
                    _commands(before, "evalsha"),
                    _commands(after, "script|load") - _commands(before, "script|load"),
                    rows,
                )
            finally:
                await close_redis(redis)

    script_exists, evalsha_before_flush, loads, rows = asyncio.run(scenario())
    assert script_exists == 0, "a SCRIPT EXISTS round trip was sent before a metering batch"
    assert evalsha_before_flush >= 5
    assert loads == 1
    assert [(r["requests"], r["prompt_tokens"]) for r in rows] == [(10, 30)]


def test_what_a_replaced_redis_lost_is_written_again_after_the_failure() -> None:
    """A primary that dies may have acknowledged writes its replica never got (replication is
    asynchronous). Here the replacement is a fresh Redis on the same port: batches written shortly
    before the failed write are written again, each still counted once."""

    async def scenario() -> tuple[bool, list[dict[str, object]]]:
        first = EmbeddedRedis().start()
        port = first.port
        redis = Redis.from_url(first.url)
        try:
            meter = Meter(UsageStore(redis, timeout_s=2), Metrics())
            for i in range(3):
                meter.submit(_record(f"lost{i}", "2026-11-23"))
                assert await meter.flush()  # acknowledged by the Redis about to die
            first.stop()
            meter.submit(_record("during", "2026-11-23"))
            failed = await meter.flush()
            with EmbeddedRedis(port) as replacement:  # knows nothing of the three
                assert replacement.port == port
                assert await meter.flush()
                meter.submit(_record("lost0", "2026-11-23"))  # a duplicate still counts once
                assert await meter.flush()
                return failed, await meter.report(["meter-team"], None, None)
        finally:
            first.stop()
            await close_redis(redis)

    failed, rows = asyncio.run(scenario())
    assert not failed
    assert [(r["requests"], r["prompt_tokens"]) for r in rows] == [(4, 12)]
