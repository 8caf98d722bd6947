"""The batch scripts on a real Redis: a line is claimed by one replica at a time, answered once
and only by its lease's holder, run again when its lease lapses, and a team's running lines stay
within batch_max_inflight; a team's queued lines within max_batch_lines."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterator

import pytest
import redis.asyncio

from gateway.batch.batchstore import CLAIMED, NOTHING, TEAM_FULL, BatchStore
from gateway.batch.filestore import FileStore
from gateway.batch.records import Batch, FileRecord
from gateway.errors import StoreUnavailable
from gateway.redis import keys
from tests.batch.conftest import chat_lines, upload, wait_for_batch
from tests.conftest import Gateway
from tests.redis_cluster import RedisServer, sync_client


@pytest.fixture(autouse=True)
def _no_batch_left_active(redis_server: RedisServer) -> Iterator[None]:
    """The batches these tests make by hand are taken off the engines' active set afterwards:
    left there, any later gateway on the session's Redis would finalize them into its own file
    store (a stranger's objects in another test's bucket)."""
    client = sync_client(redis_server.url)
    try:
        before = set(client.smembers(keys.BATCHES_ACTIVE))
        yield
        made = set(client.smembers(keys.BATCHES_ACTIVE)) - before
        if made:
            client.srem(keys.BATCHES_ACTIVE, *made)
    finally:
        client.close()


def _batch(team: str) -> Batch:
    now = int(time.time())
    return Batch(
        id="batch_" + secrets.token_hex(6),
        team=team,
        team_id="team_x",
        key_id="key_x",
        endpoint="/v1/chat/completions",
        input_file_id="file-x",
        completion_window="24h",
        model="m",
        created_at=now,
        expires_at=now + 86400,
        retain_until=now + 3600,
    )


async def _created(store: BatchStore) -> tuple[str, Batch]:
    """A new team, and a batch of it created in the store."""
    team = "team-" + secrets.token_hex(4)
    batch = _batch(team)
    await store.create(batch)
    return team, batch


def test_each_line_is_answered_once_by_its_leases_holder(redis_server: RedisServer) -> None:
    async def run() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        store = BatchStore(client, retention_s=3600)
        team, batch = await _created(store)
        assert await store.start(batch, 3, max_lines=10) == 1
        assert await store.queued(team) == 3
        a, b = "replica-a", "replica-b"
        assert await store.claim(batch, a, lease_s=30, max_inflight=2) == (CLAIMED, 0)
        assert await store.claim(batch, b, lease_s=30, max_inflight=2) == (CLAIMED, 1)
        assert await store.claim(batch, b, lease_s=30, max_inflight=2) == (TEAM_FULL, -1)
        assert await store.running(team) == 2
        # Only the lease's holder answers, and only once.
        answer = {"ok": True, "value": b"o{}", "input_tokens": 1, "output_tokens": 2}
        assert not await store.done(batch, 0, b, **answer)  # type: ignore[arg-type]
        assert await store.done(batch, 0, a, **answer)  # type: ignore[arg-type]
        assert not await store.done(batch, 0, a, **answer)  # type: ignore[arg-type]
        assert await store.queued(team) == 2
        # A lease that lapses (its replica died) puts the line back; the old holder's answer is refused.
        assert await store.claim(batch, a, lease_s=0.001, max_inflight=None) == (CLAIMED, 2)
        await asyncio.sleep(0.05)
        assert await store.claim(batch, b, lease_s=30, max_inflight=None) == (CLAIMED, 2)
        assert not await store.done(batch, 2, a, **answer)  # type: ignore[arg-type]
        assert await store.done(batch, 2, b, **answer)  # type: ignore[arg-type]
        assert await store.done(batch, 1, b, **answer)  # type: ignore[arg-type]
        assert await store.claim(batch, a, lease_s=30, max_inflight=None) == (NOTHING, -1)
        assert await store.finalizing(team, batch.id) == "completed"
        answers = {line async for line, _ in store.results(team, batch.id)}
        assert answers == {0, 1, 2}
        got = await store.get(team, batch.id)
        assert got is not None
        assert (got.completed, got.usage["output_tokens"]) == (3, 6)
        # A second batch past the team's queued-lines bound is refused whole.
        other = _batch(team)
        await store.create(other)
        assert await store.start(other, 11, max_lines=10) == -1
        await client.aclose()

    asyncio.run(run())


def test_a_batch_past_the_teams_queued_lines_fails(batch_gateway: Gateway) -> None:
    team = batch_gateway.new_team()
    batch_gateway.admin.call("PATCH", f"/admin/v1/teams/{team}", {"max_batch_lines": 5})
    client = batch_gateway.client(batch_gateway.new_key(team=team)["key"])
    too_many = client.batches.create(
        input_file_id=upload(client, chat_lines(6)), endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = wait_for_batch(client, too_many.id)
    assert done.status == "failed"
    assert done.errors is not None
    assert [e.code for e in done.errors.data or []] == ["max_batch_lines"]
    fits = client.batches.create(
        input_file_id=upload(client, chat_lines(5)), endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert wait_for_batch(client, fits.id).status == "completed"


def test_a_stopped_batch_whose_replica_died_mid_line_still_ends(redis_server: RedisServer) -> None:
    """A cancel (or the window's end) while a dead replica held a lease: no replica claims lines of
    a stopped batch, so nothing else reaps that lease. The batch must still end, and the line must
    stop counting against the team's max_batch_lines."""

    async def run() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        store = BatchStore(client, retention_s=3600)
        for how, ending in (("cancelling", "cancelled"), ("expiring", "expired")):
            team, batch = await _created(store)
            assert await store.start(batch, 3, max_lines=10) == 1
            assert await store.claim(batch, "dead-replica", lease_s=0.001, max_inflight=None) == (CLAIMED, 0)
            await store.stop(team, batch.id, how)
            await asyncio.sleep(0.05)  # the dead replica's lease lapses
            assert await store.finalizing(team, batch.id) == ending
            assert await store.queued(team) == 0
            assert await store.running(team) == 0
        await client.aclose()

    asyncio.run(run())


def test_a_batch_whose_every_line_was_answered_when_its_window_ended_completed(
    redis_server: RedisServer,
) -> None:
    async def run() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        store = BatchStore(client, retention_s=3600)
        team, batch = await _created(store)
        assert await store.start(batch, 1, max_lines=10) == 1
        assert await store.claim(batch, "a", lease_s=30, max_inflight=None) == (CLAIMED, 0)
        answer = {"ok": True, "value": b"o{}", "input_tokens": 1, "output_tokens": 2}
        assert await store.done(batch, 0, "a", **answer)  # type: ignore[arg-type]
        await store.stop(team, batch.id, "expiring")  # the window ends before finalizing looked
        assert await store.finalizing(team, batch.id) == "completed"
        await client.aclose()

    asyncio.run(run())


def test_a_batch_cancelled_while_validating_stays_cancelled_when_its_validation_fails(
    redis_server: RedisServer,
) -> None:
    async def run() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        store = BatchStore(client, retention_s=3600)
        team, batch = await _created(store)
        await store.stop(team, batch.id, "cancelling")
        await store.fail(batch, [{"code": "invalid_json", "message": "x", "param": None, "line": 1}])
        got = await store.get(team, batch.id)
        assert got is not None
        assert got.status == "cancelling"
        assert await store.finalizing(team, batch.id) == "cancelled"
        await client.aclose()

    asyncio.run(run())


def test_a_redis_failure_reading_the_answers_is_the_stores_error(redis_server: RedisServer) -> None:
    """Every store method raises StoreUnavailable, never a redis-py error: the answers' reader (a
    generator, which the store's wrapping does not cover) too."""

    async def run() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        store = BatchStore(client, retention_s=3600)
        team = "team-" + secrets.token_hex(4)
        batch = _batch(team)
        await client.set(keys.batch_lines(team, batch.id)[3], b"not a hash")
        with pytest.raises(StoreUnavailable):
            async for _ in store.results(team, batch.id):
                pass
        await client.aclose()

    asyncio.run(run())


def test_a_teams_indexes_stay_bounded_without_being_listed(redis_server: RedisServer) -> None:
    """Review of the Batch API: a team that adds files and batches but never lists them (listing
    prunes) keeps indexes no larger than one retention's adds, and indexes that expire after it.
    The clock is the entries' scores: those written a retention ago stand for old adds."""
    retention_s = 60

    async def run() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        files = FileStore(client, retention_s=retention_s)
        batches = BatchStore(client, retention_s=retention_s)
        team = "team-" + secrets.token_hex(4)
        now_ms = time.time() * 1000
        old = {f"old-{i}": now_ms - (retention_s + 1) * 1000 - i for i in range(50)}
        young = {"young": now_ms - retention_s * 1000 / 2}
        for index in (keys.files_index(team), keys.batches_index(team)):
            await client.zadd(index, {**old, **young})
        now = int(time.time())
        record = FileRecord("file-new", "team_x", 1, now, "a.jsonl", "batch", now + retention_s)
        await files.put(team, record)
        await batches.create(_batch(team))
        for index in (keys.files_index(team), keys.batches_index(team)):
            assert await client.zcard(index) == 2  # the young entry and the one just added
            assert 0 < await client.pttl(index) <= (retention_s + 1) * 1000
        await client.aclose()

    asyncio.run(run())
