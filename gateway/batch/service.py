"""`BatchService`: the Files and Batch API's parts for one app, built in its lifespan when
SLUICEGATE_FILES_URL is set (gateway.app): the file store, the Redis stores of files and batches,
this replica's engine and the store's retention sweep (gateway/files/retention.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.batch.batchstore import BatchStore
from gateway.batch.engine import BatchEngine
from gateway.batch.filestore import FileStore
from gateway.batch.lifecycle import Lifecycle
from gateway.batch.metrics import BatchMetrics
from gateway.config import Settings
from gateway.files.backends import open_storage
from gateway.files.retention import RetentionSweeper
from gateway.keys.store import KeyStore
from gateway.observability.metrics import Metrics
from gateway.proxy.dialect import Dialect
from gateway.proxy.pipeline import Pipeline
from gateway.routing.router import Router
from gateway.state import AppState


class BatchService:
    def __init__(
        self,
        settings: Settings,
        *,
        files: FileStore,
        batches: BatchStore,
        router: Router,
        keystore: KeyStore,
        pipeline: Pipeline,
        dialects: Mapping[str, Dialect[Any]],
        metrics: Metrics,
    ) -> None:
        assert settings.files_url is not None
        self.storage = open_storage(settings.files_url)
        self.retention_s = settings.files_retention_s
        self.files = files
        self.batches = batches
        self.engine = BatchEngine(
            self.batches,
            Lifecycle(self.batches, self.files, self.storage, keystore),
            self.storage,
            router,
            keystore,
            pipeline,
            dialects,
            BatchMetrics(metrics.registry),
            lease_s=settings.batch_lease_s,
            poll_interval_s=settings.batch_poll_interval_s,
        )

        # The bytes of files past retention (their records expire in Redis at the same age).
        self.sweeper = RetentionSweeper(self.storage, metrics, retention_s=settings.files_retention_s)

    def start(self, state: AppState) -> None:
        self.engine.start(state)
        self.sweeper.start()

    async def close(self) -> None:
        await self.sweeper.stop()
        await self.engine.stop()
        await self.storage.close()
