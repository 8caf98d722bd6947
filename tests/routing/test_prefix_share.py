"""Two replicas' prefix indexes shared through a real Redis (gateway/routing/prefix_share.py)."""

from __future__ import annotations

import asyncio
import secrets
import struct

import pytest
from redis.asyncio import Redis

from gateway.observability.metrics import Metrics
from gateway.redis.client import RedisClient, close_redis
from gateway.routing.prefix import PrefixIndex, block_hashes
from gateway.routing.prefix_share import MAX_BACKOFF_S, PrefixShare
from gateway.routing.prefix_store import PrefixStore
from tests.redis_cluster import RedisServer, async_client
from tests.servers import free_port
from tests.waiting import eventually

pytestmark = pytest.mark.also_on_cluster

BLOCKS = block_hashes(secrets.token_bytes(64 * 12), 64)


def _share(
    redis: RedisClient, key: str, interval_s: float = 0.02
) -> tuple[PrefixShare, PrefixIndex, Metrics]:
    index, metrics = PrefixIndex(1000), Metrics()
    share = PrefixShare(PrefixStore(redis, key=key), index, metrics, interval_s=interval_s, timeout_s=1.0)
    return share, index, metrics


def _key() -> str:
    # A key of this test's own (the session's Redis is shared), with the gateway's key's shape.
    return f"sg:{{prefix-test-{secrets.token_hex(4)}}}:log"


def test_a_chain_recorded_by_one_replica_is_found_by_the_other(redis_server: RedisServer) -> None:
    async def run() -> None:
        redis = async_client(redis_server.url)
        key = _key()
        one, one_index, _ = _share(redis, key)
        two, two_index, _ = _share(redis, key)
        one.start()
        two.start()
        try:
            one_index.record(BLOCKS, "http://a:1")
            one.note("http://a:1", BLOCKS)
            await eventually(lambda: two_index.known_length(BLOCKS, "http://a:1") == len(BLOCKS), "shared")
            # And back: a turn the second replica routed extends the chain for the first.
            longer = block_hashes(bytes(64 * 12) + b"more" * 64, 64)
            two_index.record(longer, "http://a:1")
            two.note("http://a:1", longer[len(BLOCKS) :])
            await eventually(
                lambda: one_index.match(longer, ["http://a:1"]) == {"http://a:1": len(longer)}, "back"
            )
            # A replica that starts later reads the (bounded) stream first: it knows both at once.
            late, late_index, _ = _share(redis, key)
            await late.sync()
            assert late_index.known_length(BLOCKS, "http://a:1") == len(BLOCKS)
            assert await redis.ttl(key) > 0  # the stream expires when nobody writes
        finally:
            await one.stop()
            await two.stop()
            await redis.delete(key)
            await close_redis(redis)

    asyncio.run(run())


def test_redis_down_keeps_the_local_index_and_counts_failures() -> None:
    async def run() -> None:
        redis = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.5)
        share, index, metrics = _share(redis, _key())
        share.start()
        try:
            index.record(BLOCKS, "http://a:1")
            share.note("http://a:1", BLOCKS)

            def failures() -> float:
                return metrics.registry.get_sample_value("sluicegate_prefix_share_failures_total") or 0.0

            await eventually(lambda: failures() >= 2, "two failed rounds")
            assert index.known_length(BLOCKS, "http://a:1") == len(BLOCKS)
            assert share._pending_blocks == len(BLOCKS)  # kept for when Redis is back, bounded
        finally:
            await share.stop()
            await close_redis(redis)

    asyncio.run(run())


def test_hostile_or_malformed_entries_are_skipped_and_the_reader_goes_on(redis_server: RedisServer) -> None:
    """Anyone who can write to Redis can add entries: none of them stops the reader, grows the
    index past what gateways write, or records a URL that is not one of this replica's endpoints."""
    from gateway.routing.prefix_share import MAX_ENTRY_BYTES, encode

    async def run() -> None:
        redis = async_client(redis_server.url)
        key = _key()
        index, metrics = PrefixIndex(100_000), Metrics()
        known = {"http://a:1": "http://a:1"}
        share = PrefixShare(
            PrefixStore(redis, key=key),
            index,
            metrics,
            interval_s=0.02,
            timeout_s=1.0,
            endpoints=lambda: known,
        )
        huge = [secrets.token_bytes(8) for _ in range(MAX_ENTRY_BYTES // 8 + 1)]
        try:
            for fields in (
                {b"x": b"no fields a gateway writes"},
                {b"r": b"other", b"d": b"\xff" * 5},  # a torn header
                {b"r": b"other", b"d": struct.pack("<HI", 10, 2**32 - 1) + b"http://a:1"},  # lies
                {b"r": b"other", b"d": encode([("http://a:1", huge)])},  # too large
                {b"r": b"other", b"d": encode([("http://evil:6666", BLOCKS)])},  # not an endpoint
                {b"r": b"other", b"d": encode([("http://a:1", BLOCKS)])},  # fine
            ):
                await redis.xadd(key, fields)  # type: ignore[arg-type]
            await share.sync()
            assert index.known_length(BLOCKS, "http://a:1") == len(BLOCKS)
            assert index.known_length(BLOCKS, "http://evil:6666") == 0
            assert index.known_length(huge, "http://a:1") == 0
            assert len(index) == len(BLOCKS)
            # The URL read is the replica's own string, not one copy per record.
            holder = index._blocks[BLOCKS[-1]][0]
            assert holder is known["http://a:1"]
        finally:
            await redis.delete(key)
            await close_redis(redis)

    asyncio.run(run())


def test_redis_down_backs_off_and_an_unexpected_error_does_not_end_the_loop() -> None:
    async def run() -> None:
        redis = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.5)
        share, _, metrics = _share(redis, _key(), interval_s=0.05)
        try:
            assert share.delay() == 0.05
            delays = []
            for _ in range(10):
                await share.round()  # refused at once: no waiting on a timeout here
                delays.append(share.delay())
            assert delays[0] == 0.1
            assert delays == sorted(delays)
            assert delays[-1] == MAX_BACKOFF_S

            async def broken() -> None:
                raise ValueError("a bug")

            share.sync = broken  # type: ignore[method-assign]
            before = metrics.registry.get_sample_value("sluicegate_prefix_share_failures_total")
            await share.round()  # counted, not raised
            after = metrics.registry.get_sample_value("sluicegate_prefix_share_failures_total")
            assert after == (before or 0) + 1

            async def works() -> None:
                return None

            share.sync = works  # type: ignore[method-assign]
            await share.round()
            assert share.delay() == 0.05  # back to the interval once Redis answers
        finally:
            await close_redis(redis)

    asyncio.run(run())
