"""Kubernetes discovery: the entry point the app's lifespan starts and stops.

`start_discovery` returns at once. Connecting (loading the configuration, which may fail outside
a cluster or before a token is mounted) is retried in the background with backoff, so the gateway
starts and serves its static models whatever the state of the API server. Nothing of the client
library is imported unless the model table or the settings ask for Kubernetes.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.config import Settings
from gateway.discovery.sink import DiscoverySink
from gateway.discovery.watch import Backoff, ListWatch, Timing
from gateway.model_table import KubernetesTarget, ModelTable

if TYPE_CHECKING:
    from gateway.discovery.autodiscovery import ServiceModels
    from gateway.discovery.client import ClusterAccess, KubernetesApi
    from gateway.discovery.endpoints import EndpointWatches

log = logging.getLogger("sluicegate.discovery")

DEFAULT_SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class DiscoveryOptions:
    timing: Timing = field(default_factory=Timing)
    environ: Mapping[str, str] | None = None  # None: os.environ
    service_account_dir: str = DEFAULT_SERVICE_ACCOUNT_DIR


def kubernetes_targets(table: ModelTable) -> list[tuple[str, KubernetesTarget]]:
    """(pool name, target) of every pool of the table whose endpoints come from a Service."""
    return [
        (pool.name, pool.kubernetes)
        for model in table.models
        for pool in model.pool_configs()
        if pool.kubernetes is not None
    ]


async def start_discovery(
    settings: Settings, table: ModelTable, sink: DiscoverySink, options: DiscoveryOptions | None = None
) -> Discovery | None:
    """Starts watching; None when nothing asks for Kubernetes. Never raises for an unreachable
    API server or a missing configuration: those are logged and retried."""
    targets = kubernetes_targets(table)
    if not targets and not settings.kubernetes_autodiscovery:
        return None
    discovery = Discovery(settings, table, sink, options or DiscoveryOptions())
    discovery.start(targets)
    return discovery


class Discovery:
    def __init__(
        self, settings: Settings, table: ModelTable, sink: DiscoverySink, options: DiscoveryOptions
    ) -> None:
        self._settings = settings
        self._table = table
        self._sink = sink
        self._options = options
        self._environ = os.environ if options.environ is None else options.environ
        self._task: asyncio.Task[None] | None = None
        self._api: KubernetesApi | None = None
        self.access: ClusterAccess | None = None
        self.endpoints: EndpointWatches | None = None
        self.models: ServiceModels | None = None
        self.service_watches: dict[str, ListWatch] = {}
        self._service_tasks: list[asyncio.Task[None]] = []

    @property
    def connected(self) -> bool:
        return self._api is not None

    def in_sync(self) -> bool:
        """Connected, and every watch listed and not failing now: what `sluicegate_discovery_up`
        reports (the endpoints in use may be stale while it is 0)."""
        return (
            self.endpoints is not None
            and self.endpoints.in_sync()
            and all(watch.in_sync for watch in self.service_watches.values())
        )

    def start(self, targets: list[tuple[str, KubernetesTarget]]) -> None:
        self._task = asyncio.create_task(self._run(targets), name="discovery-start")

    async def _run(self, targets: list[tuple[str, KubernetesTarget]]) -> None:
        from gateway.discovery.autodiscovery import MODEL_KEY, ServiceModels
        from gateway.discovery.client import KubernetesApi
        from gateway.discovery.endpoints import EndpointWatches
        from gateway.discovery.trust import ServiceTrust

        access = await self._connect()
        timing = self._options.timing
        self._api = api = KubernetesApi(access, timing)
        self.endpoints = endpoints = EndpointWatches(api, self._sink, timing)
        for pool, target in targets:
            endpoints.set_pool(pool, target.namespace or access.namespace, target.service, target.port)
        if not self._settings.kubernetes_autodiscovery:
            return
        trust = ServiceTrust(
            own_namespace=access.namespace,
            model_namespaces=self._settings.kubernetes_model_namespaces,
            max_weight=self._settings.kubernetes_max_weight,
        )
        watched = self._settings.kubernetes_namespaces or (access.namespace,)
        for warning in trust.start_warnings(watched):
            log.warning("Kubernetes autodiscovery: %s", warning)
        self.models = models = ServiceModels(self._sink, endpoints, self._table.by_name().keys(), trust)
        for namespace in watched:
            watch = ListWatch(api.services(namespace, MODEL_KEY), models.store(namespace), timing)
            self.service_watches[namespace] = watch
            self._service_tasks.append(
                asyncio.create_task(watch.run(), name=f"discovery-services-{namespace}")
            )

    async def _connect(self) -> ClusterAccess:
        from gateway.discovery.client import load_access

        timing = self._options.timing
        backoff = Backoff(timing.backoff_initial_s, timing.backoff_max_s)
        while True:
            try:
                access = await load_access(
                    self._settings.kubeconfig, self._environ, self._options.service_account_dir
                )
            except Exception as exc:
                # Whatever the loader trips on (a missing file, bad YAML, a failing exec plugin),
                # the gateway keeps serving. The library's messages name files and fields, not
                # their contents.
                delay = backoff.next_delay()
                log.log(
                    # The first failure, then every 10th: visible, without flooding the log.
                    logging.WARNING if backoff.failures % 10 == 1 else logging.DEBUG,
                    "Kubernetes discovery: no usable cluster configuration (%s: %s); retrying in %.1fs",
                    type(exc).__name__,
                    str(exc)[:300],
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            self.access = access
            log.info(
                "Kubernetes discovery: using %s at %s, own namespace %s",
                access.source,
                access.configuration.host,
                access.namespace,
            )
            return access

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._service_tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._service_tasks.clear()
        if self.endpoints is not None:
            await self.endpoints.stop()
        if self._api is not None:
            await self._api.close()
            self._api = None
