"""What the discovery tests share: a recording sink, polling waits, and discovery started against
a fake API server through a kubeconfig file, as an operator would run it outside a cluster."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from pathlib import Path
from typing import Any

from gateway.config import Settings
from gateway.discovery.kubernetes import Discovery, DiscoveryOptions, start_discovery
from gateway.discovery.watch import Timing
from gateway.model_table import KubernetesTarget, ModelConfig, ModelTable
from tests.discovery.fake_apiserver import FakeApiServer, running_apiserver

FAST = Timing(
    list_timeout_s=2.0,
    watch_timeout_s=30,
    watch_grace_s=2.0,
    backoff_initial_s=0.05,
    backoff_max_s=0.3,
    min_watch_s=0.2,
)


class RecordingSink:
    """A DiscoverySink that remembers every call."""

    def __init__(self) -> None:
        self.endpoints: dict[str, list[str]] = {}
        self.models: dict[str, ModelConfig] = {}
        self.calls: list[tuple[Any, ...]] = []

    def set_endpoints(self, pool: str, urls: Collection[str]) -> None:
        self.endpoints[pool] = sorted(urls)
        self.calls.append(("set_endpoints", pool, tuple(sorted(urls))))

    def add_model(self, model: ModelConfig) -> None:
        self.models[model.name] = model
        self.calls.append(("add_model", model.name, tuple(p.name for p in model.pools)))

    def remove_model(self, name: str) -> None:
        self.models.pop(name, None)
        self.calls.append(("remove_model", name))

    def endpoint_sets(self, pool: str) -> list[tuple[str, ...]]:
        return [call[2] for call in self.calls if call[0] == "set_endpoints" and call[1] == pool]


def run_with_apiserver(scenario: Callable[[FakeApiServer], Awaitable[None]], logs: list[str]) -> None:
    """Run `scenario` on a fresh event loop with a fake API server; its bearer token must not
    appear in any log line (`logs`: the all_logs fixture)."""
    tokens: list[str] = []

    async def main() -> None:
        async with running_apiserver() as server:
            tokens.append(server.token)
            await scenario(server)

    asyncio.run(main())
    text = "\n".join(logs)
    assert tokens
    assert not [token for token in tokens if token in text], "a bearer token was logged"


def k8s_model(
    name: str, service: str, *, namespace: str | None = "llm", port: str | int = "http"
) -> ModelConfig:
    return ModelConfig(
        name=name, kubernetes=KubernetesTarget(service=service, namespace=namespace, port=port)
    )


@contextlib.asynccontextmanager
async def discovering(
    server: FakeApiServer,
    tmp_path: Path,
    table: ModelTable,
    *,
    autodiscovery: bool = False,
    namespaces: tuple[str, ...] = (),
    timing: Timing = FAST,
    kubeconfig: Path | None = None,
    model_namespaces: str = "",
) -> AsyncIterator[tuple[Discovery, RecordingSink]]:
    """Discovery of `table` (and with `autodiscovery`, of labelled Services) with the gateway's own
    namespace `llm`; `model_namespaces` is SLUICEGATE_KUBERNETES_MODEL_NAMESPACES."""
    if kubeconfig is None:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    settings = Settings.from_env(
        {
            "KUBECONFIG": str(kubeconfig),
            "SLUICEGATE_KUBERNETES_AUTODISCOVERY": str(autodiscovery).lower(),
            "SLUICEGATE_KUBERNETES_NAMESPACES": ",".join(namespaces),
            "SLUICEGATE_KUBERNETES_MODEL_NAMESPACES": model_namespaces,
        }
    )
    sink = RecordingSink()
    options = DiscoveryOptions(timing=timing, environ={}, service_account_dir=str(tmp_path / "no-sa"))
    discovery = await start_discovery(settings, table, sink, options)
    assert discovery is not None
    try:
        yield discovery, sink
    finally:
        await discovery.stop()
