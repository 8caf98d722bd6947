"""The retention sweep on every backend: objects whose age is set by the test (a sweep's `now` moved
past their retention, or a directory file's mtime moved back), never by waiting for them to age."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.files.retention import RetentionSweeper, store_kind, sweep
from gateway.files.s3 import S3Storage
from gateway.files.storage import FileStorage
from gateway.observability.metrics import Metrics
from tests.files.conftest import Backend, S3Place, chunks_of, on_storage
from tests.waiting import eventually

DAY = 24 * 3600.0
MONTH = 30 * DAY
NAMES = ("team/t1/file-a", "team/t1/file-b", "team/t2/batch-out")


def expired_total(metrics: Metrics, kind: str) -> float:
    return metrics.registry.get_sample_value("sluicegate_files_expired_total", {"store": kind}) or 0.0


async def write_all(storage: FileStorage) -> float:
    """Writes NAMES; returns the newest modification time the store gave them."""
    for name in NAMES:
        await storage.write(name, chunks_of(b"line\n" * 10), max_bytes=1000)
    times = [stat.modified_at for name in NAMES if (stat := await storage.stat(name)) is not None]
    assert len(times) == len(NAMES)
    return max(times)


def test_nothing_younger_than_the_retention_goes_and_everything_older_does(backend: Backend) -> None:
    metrics = Metrics()

    async def case(storage: FileStorage) -> None:
        assert store_kind(storage) == backend.kind
        newest = await write_all(storage)
        oldest = min([o.modified_at async for o in storage.list("")])
        assert await sweep(storage, oldest + MONTH - 1, MONTH, metrics) == 0
        assert {o.name async for o in storage.list("")} == set(NAMES)
        assert expired_total(metrics, backend.kind) == 0
        assert await sweep(storage, newest + MONTH + 1, MONTH, metrics) == len(NAMES)
        assert [o async for o in storage.list("")] == []
        assert await storage.stat(NAMES[0]) is None
        assert expired_total(metrics, backend.kind) == len(NAMES)

    on_storage(backend, case)


def test_a_sweep_takes_only_the_old_objects(backend: Backend) -> None:
    if backend.age is None:
        pytest.skip("an S3 store sets LastModified itself: its ages are moved by `now` (the case above)")
    aged = backend.age
    metrics = Metrics()

    async def case(storage: FileStorage) -> None:
        newest = await write_all(storage)
        await aged(NAMES[0], MONTH + DAY)
        await aged(NAMES[2], 40 * DAY)
        assert await sweep(storage, newest, MONTH, metrics) == 2
        assert {o.name async for o in storage.list("")} == {NAMES[1]}
        assert expired_total(metrics, backend.kind) == 2

    on_storage(backend, case)


def test_the_sweeper_sweeps_on_its_schedule_until_stopped(backend: Backend) -> None:
    metrics = Metrics()

    async def case(storage: FileStorage) -> None:
        newest = await write_all(storage)
        sweeper = RetentionSweeper(
            storage, metrics, retention_s=MONTH, interval_s=0.01, clock=lambda: newest + MONTH + 1
        )
        sweeper.start()
        try:
            await eventually(lambda: sweeper.sweeps >= 2, "two sweeps")
        finally:
            await sweeper.stop()
        assert [o async for o in storage.list("")] == []
        assert expired_total(metrics, backend.kind) == len(NAMES)

    on_storage(backend, case)


def test_a_failed_sweep_is_logged_without_the_store_s_address_and_tried_again(
    s3_place: S3Place, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics()
    url = s3_place.url.replace(s3_place.bucket, "bucket-that-is-not-there")

    async def case() -> None:
        storage = S3Storage.from_url(url)
        sweeper = RetentionSweeper(storage, metrics, interval_s=0.01)
        try:
            sweeper.start()
            await eventually(lambda: sweeper.sweeps >= 2, "two failed sweeps")
            await sweeper.stop()
        finally:
            await storage.close()

    with caplog.at_level(logging.WARNING, logger="sluicegate.files"):
        asyncio.run(case())
    failures = [r.getMessage() for r in caplog.records if "retention sweep failed" in r.getMessage()]
    assert len(failures) >= 2
    assert all("NoSuchBucket" in m for m in failures)
    assert not any("bucket-that-is-not-there" in m or "127.0.0.1" in m for m in failures)
    assert expired_total(metrics, "s3") == 0
