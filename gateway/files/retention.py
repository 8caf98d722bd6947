"""The retention sweep: stored objects older than SLUICEGATE_FILES_RETENTION_S (30 days by default)
are deleted, and each deletion counted in `sluicegate_files_expired_total{store}`.

Their records (gateway/batch) expire in Redis at the same age, so the API stops naming a file when
its record goes; the sweep takes the bytes left behind, including those of a replica that died
mid-delete. It works from the store's own listing and modification times, so it needs nothing but
the FileStorage seam and runs the same on a directory and on S3.

Every replica with a store sweeps, each on its own jittered schedule; deletes are idempotent, so two
sweeps that overlap remove nothing twice, though both may count the same object.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable

from gateway.files.storage import FileStorage, StorageError
from gateway.observability.metrics import Metrics

log = logging.getLogger("sluicegate.files")

DEFAULT_RETENTION_S = 30 * 24 * 3600.0
DEFAULT_INTERVAL_S = 3600.0
# The store kinds the counter's `store` label may hold: a bounded set, whatever backend is passed.
STORE_KINDS = ("directory", "s3")
# Names deleted per call: S3's DeleteObjects limit, and a bound on what one sweep holds in memory.
_DELETE_BATCH = 1000


def store_kind(storage: FileStorage) -> str:
    """`directory` or `s3` (the backend's module, gateway/files/<kind>.py), else `other`."""
    kind = type(storage).__module__.rpartition(".")[2]
    return kind if kind in STORE_KINDS else "other"


async def sweep(storage: FileStorage, now: float, retention_s: float, metrics: Metrics) -> int:
    """Deletes every object of `storage` modified `retention_s` or more before `now` (Unix seconds);
    returns how many. StorageError when the store fails: what was deleted before is counted."""
    cutoff = now - retention_s
    counter = metrics.files_expired.labels(store_kind(storage))
    deleted = 0
    expired: list[str] = []
    try:
        async for stored in storage.list(""):
            if stored.modified_at <= cutoff:
                expired.append(stored.name)
            if len(expired) >= _DELETE_BATCH:
                await storage.delete(expired)
                deleted += len(expired)
                counter.inc(len(expired))
                expired = []
        if expired:
            await storage.delete(expired)
            deleted += len(expired)
            counter.inc(len(expired))
    finally:
        if deleted:
            log.info("retention sweep deleted %d stored files", deleted)
    return deleted


class RetentionSweeper:
    """Runs `sweep` every `interval_s` from `start()` until `stop()`, the first after a random part
    of an interval (replicas started together do not sweep together). A failed sweep is logged by
    its error class (never the store's address) and the next one tries again."""

    def __init__(
        self,
        storage: FileStorage,
        metrics: Metrics,
        *,
        retention_s: float = DEFAULT_RETENTION_S,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._storage = storage
        self._metrics = metrics
        self._retention_s = retention_s
        self._interval_s = interval_s
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self.sweeps = 0  # finished sweeps, failed or not: what a test waits on

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        await asyncio.sleep(random.uniform(0, self._interval_s))
        while True:
            await self.sweep_once()
            await asyncio.sleep(self._interval_s)

    async def sweep_once(self) -> int:
        """One sweep now; 0 when the store failed (logged)."""
        try:
            return await sweep(self._storage, self._clock(), self._retention_s, self._metrics)
        except StorageError as exc:
            log.warning("retention sweep failed: %s", exc)
            return 0
        finally:
            self.sweeps += 1
