"""Talking to the API server with kubernetes_asyncio: configuration, own namespace, and the two
collections discovery reads (EndpointSlices, Services) as raw JSON.

In a pod (KUBERNETES_SERVICE_HOST set) the service account's in-cluster config is used, otherwise
the kubeconfig (settings.kubeconfig, KUBECONFIG or ~/.kube/config). Configuration objects are
built here and passed explicitly: the library's process-wide default is never set.

Responses are read raw (`_preload_content=False`) rather than deserialized into the generated
models: those reject objects the API server does send (an EndpointSlice with `endpoints: null`),
and a watch needs its HTTP status checked by hand anyway.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api, DiscoveryV1Api
from kubernetes_asyncio.config.config_exception import ConfigException
from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader
from kubernetes_asyncio.config.kube_config import load_kube_config

from gateway.discovery.watch import JSON, ApiError, Gone, Timing

log = logging.getLogger("sluicegate.discovery")

MAX_LIST_BYTES = 16 * 1024 * 1024
MAX_ERROR_BYTES = 64 * 1024
# Every watch holds a connection for minutes: the pool must hold them all (each Service in use
# is one watch), and still be bounded.
MAX_CONNECTIONS = 512

__all__ = ["ClusterAccess", "ConfigException", "KubernetesApi", "load_access", "own_namespace"]


def own_namespace(service_account_dir: str, environ: Mapping[str, str], context_namespace: str | None) -> str:
    """The namespace the gateway runs in: the service account's, else POD_NAMESPACE (downward
    API), else the kubeconfig context's, else "default"."""
    try:
        with open(os.path.join(service_account_dir, "namespace"), encoding="utf-8") as f:
            namespace = f.read().strip()
        if namespace:
            return namespace
    except OSError:
        pass
    return environ.get("POD_NAMESPACE", "").strip() or context_namespace or "default"


@dataclass
class ClusterAccess:
    configuration: Configuration
    namespace: str
    source: str  # for logs: "in-cluster service account" or the kubeconfig's path, never contents
    kubeconfig: str | None
    environ: Mapping[str, str]
    service_account_dir: str


async def load_access(
    kubeconfig: str | None, environ: Mapping[str, str], service_account_dir: str
) -> ClusterAccess:
    """Raises ConfigException (or OSError) when there is no usable configuration."""
    configuration = Configuration()
    context_namespace = await _load_into(configuration, kubeconfig, environ, service_account_dir)
    in_cluster = bool(environ.get("KUBERNETES_SERVICE_HOST"))
    return ClusterAccess(
        configuration=configuration,
        namespace=own_namespace(service_account_dir, environ, context_namespace),
        source="in-cluster service account"
        if in_cluster
        else f"kubeconfig {_kubeconfig_path(kubeconfig, environ)}",
        kubeconfig=kubeconfig,
        environ=environ,
        service_account_dir=service_account_dir,
    )


def _any_file(paths: str) -> bool:
    # Small local reads, as the library's own loader does right after: no thread needed.
    return any(os.path.exists(os.path.expanduser(p)) for p in paths.split(os.pathsep) if p)


def _kubeconfig_path(kubeconfig: str | None, environ: Mapping[str, str]) -> str:
    return kubeconfig or environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


async def _load_into(
    configuration: Configuration, kubeconfig: str | None, environ: Mapping[str, str], service_account_dir: str
) -> str | None:
    if environ.get("KUBERNETES_SERVICE_HOST"):
        # The loader re-reads the token file as the kubelet rotates it (bound tokens expire).
        InClusterConfigLoader(
            token_filename=os.path.join(service_account_dir, "token"),
            cert_filename=os.path.join(service_account_dir, "ca.crt"),
            environ=dict(environ),
        ).load_and_set(configuration)
        return None
    path = _kubeconfig_path(kubeconfig, environ)
    # KUBECONFIG may list several files; the library's own error for none is cryptic.
    if not _any_file(path):
        raise ConfigException(f"no kubeconfig at {path}, and not in a pod (KUBERNETES_SERVICE_HOST unset)")
    loader = await load_kube_config(
        config_file=path,
        client_configuration=configuration,
        persist_config=False,  # never write to the operator's kubeconfig
    )
    context = loader.current_context or {}
    namespace = (context.get("context") or {}).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else None


ListCall = Callable[..., Awaitable[Any]]


class KubernetesApi:
    """One HTTP client to the API server, shared by every watch."""

    def __init__(self, access: ClusterAccess, timing: Timing) -> None:
        self.access = access
        self.timing = timing
        access.configuration.connection_pool_maxsize = MAX_CONNECTIONS
        self._client = ApiClient(access.configuration)
        self._client.user_agent = "sluicegate-discovery"
        self._core = CoreV1Api(self._client)
        self._discovery = DiscoveryV1Api(self._client)
        self._refreshed_at = -math.inf
        self._refresh_lock = asyncio.Lock()

    def endpoint_slices(self, namespace: str, label_selector: str) -> RawCollection:
        return RawCollection(
            self,
            self._discovery.list_namespaced_endpoint_slice,
            namespace,
            label_selector,
            f"EndpointSlices in {namespace} ({label_selector})",
        )

    def services(self, namespace: str, label_selector: str) -> RawCollection:
        return RawCollection(
            self,
            self._core.list_namespaced_service,
            namespace,
            label_selector,
            f"Services in {namespace} ({label_selector})",
        )

    async def refresh_credentials(self) -> None:
        """After a 401: read the configuration again (a rotated token, an exec plugin's new one)."""
        async with self._refresh_lock:
            # At most once per backoff cap: a wrong token must not make us re-read files in a loop.
            if time.monotonic() - self._refreshed_at < self.timing.backoff_max_s:
                return
            self._refreshed_at = time.monotonic()
            access = self.access
            try:
                await _load_into(
                    access.configuration, access.kubeconfig, access.environ, access.service_account_dir
                )
            except (ConfigException, OSError) as exc:
                log.warning(
                    "Kubernetes discovery: reloading credentials from %s failed: %s", access.source, exc
                )

    async def close(self) -> None:
        await self._client.close()


class RawCollection:
    """A `watch.Collection` over one generated list call, read as raw JSON."""

    def __init__(
        self, api: KubernetesApi, call: ListCall, namespace: str, selector: str, description: str
    ) -> None:
        self._api = api
        self._call = call
        self.namespace = namespace
        self.label_selector = selector
        self.description = description

    async def list(self) -> tuple[list[JSON], str]:
        timing = self._api.timing
        response = await self._call(
            self.namespace,
            label_selector=self.label_selector,
            _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(total=timing.list_timeout_s),
        )
        try:
            if response.status != 200:
                raise await self._error(response)
            body = await _read_bounded(response, MAX_LIST_BYTES)
        finally:
            response.close()
        document = json.loads(body)
        metadata = document.get("metadata") if isinstance(document, dict) else None
        resource_version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        if not isinstance(resource_version, str) or not resource_version:
            raise ValueError("list response without metadata.resourceVersion")
        items = document.get("items") or []
        return [item for item in items if isinstance(item, dict)], resource_version

    @asynccontextmanager
    async def watch(self, resource_version: str) -> AsyncIterator[AsyncIterator[JSON]]:
        timing = self._api.timing
        response = await self._call(
            self.namespace,
            label_selector=self.label_selector,
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timing.watch_timeout_s,
            _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(
                total=timing.watch_timeout_s + timing.watch_grace_s,
                sock_connect=timing.list_timeout_s,
            ),
        )
        try:
            if response.status != 200:
                raise await self._error(response)
            yield _events(response)
        finally:
            response.close()

    async def _error(self, response: aiohttp.ClientResponse) -> ApiError:
        body = await _read_bounded(response, MAX_ERROR_BYTES, truncate=True)
        reason, message = response.reason or "", ""
        try:
            status_doc = json.loads(body)
        except ValueError:
            status_doc = None
        if isinstance(status_doc, dict):
            reason = str(status_doc.get("reason") or reason)
            message = str(status_doc.get("message") or "")[:300]
        if response.status == 401:
            await self._api.refresh_credentials()
        if response.status == 403:
            message += " (does the gateway's ServiceAccount have RBAC to list and watch this?)"
        error = Gone if response.status == 410 else ApiError
        return error(response.status, reason, message)


async def _read_bounded(response: aiohttp.ClientResponse, limit: int, *, truncate: bool = False) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await response.content.read(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            if truncate:
                return b"".join(chunks)
            raise ValueError(f"response body larger than {limit} bytes")
        chunks.append(chunk)


async def _events(response: aiohttp.ClientResponse) -> AsyncIterator[JSON]:
    # aiohttp bounds a line by its read buffer (the client library sets 2 MiB): no unbounded line.
    while True:
        line = await response.content.readline()
        if not line:
            return
        if not line.strip():
            continue
        event = json.loads(line)
        if not isinstance(event, dict):
            raise ValueError("a watch event that is not a JSON object")
        yield event
