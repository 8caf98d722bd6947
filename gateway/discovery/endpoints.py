"""EndpointSlices → pool endpoint URLs, and one list-then-watch per Service feeding its pools.

A Service's endpoints are the union of all its EndpointSlices (keyed by slice name). An endpoint
is used while `conditions.ready` is true or unset (the API's rule: unset means ready) and it is not
terminating; every address of it counts, on the slice port that matches the pool's port (by name,
or by number).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from gateway.discovery.sink import DiscoverySink
from gateway.discovery.watch import JSON, Collection, ListWatch, Timing

log = logging.getLogger("sluicegate.discovery")

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


@dataclass(frozen=True)
class SlicePort:
    name: str
    port: int


@dataclass(frozen=True)
class SliceView:
    """What matters of one EndpointSlice: its TCP ports and the addresses of usable endpoints."""

    ports: tuple[SlicePort, ...]
    addresses: tuple[str, ...]


def parse_slice(obj: JSON) -> SliceView:
    ports: list[SlicePort] = []
    for raw in obj.get("ports") or ():
        if not isinstance(raw, dict):
            continue
        number = raw.get("port")
        # A port without a number means "all ports" (nothing to dial); only TCP carries HTTP.
        if not isinstance(number, int) or isinstance(number, bool) or not 0 < number < 65536:
            continue
        if (raw.get("protocol") or "TCP") != "TCP":
            continue
        ports.append(SlicePort(name=str(raw.get("name") or ""), port=number))
    addresses: list[str] = []
    for endpoint in obj.get("endpoints") or ():
        if not isinstance(endpoint, dict) or not _usable(endpoint):
            continue
        addresses.extend(a for a in endpoint.get("addresses") or () if isinstance(a, str) and a)
    return SliceView(ports=tuple(ports), addresses=tuple(addresses))


def _usable(endpoint: JSON) -> bool:
    conditions = endpoint.get("conditions")
    if not isinstance(conditions, dict):
        return True
    return conditions.get("ready") is not False and conditions.get("terminating") is not True


def _match_port(ports: Iterable[SlicePort], wanted: str | int) -> int | None:
    for port in ports:
        if (isinstance(wanted, str) and port.name == wanted) or port.port == wanted:
            return port.port
    return None


def base_url(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}"


def slice_urls(view: SliceView, port: str | int) -> set[str]:
    number = _match_port(view.ports, port)
    if number is None:
        return set()
    return {base_url(address, number) for address in view.addresses}


def endpoint_urls(slices: Iterable[JSON | SliceView], port: str | int) -> frozenset[str]:
    """The base URLs of every usable endpoint of a Service, from all of its slices."""
    urls: set[str] = set()
    for item in slices:
        urls |= slice_urls(item if isinstance(item, SliceView) else parse_slice(item), port)
    return frozenset(urls)


@dataclass
class ServiceEndpoints:
    """A watch Store: the slices of one Service and the pools whose endpoints come from it."""

    sink: DiscoverySink
    slices: dict[str, SliceView] = field(default_factory=dict)
    pools: dict[str, str | int] = field(default_factory=dict)  # pool name → port name or number
    sent: dict[str, frozenset[str]] = field(default_factory=dict)

    def replace(self, objects: list[JSON]) -> None:
        self.slices = {name: parse_slice(obj) for obj in objects if (name := _name(obj))}
        self.publish()

    def apply(self, event_type: str, obj: JSON) -> None:
        name = _name(obj)
        if not name:
            return
        if event_type == "DELETED":
            self.slices.pop(name, None)
        else:
            self.slices[name] = parse_slice(obj)
        self.publish()

    def publish(self) -> None:
        """Tell the sink each pool's current set, where it differs from what it was last told."""
        for pool, port in self.pools.items():
            urls = endpoint_urls(self.slices.values(), port)
            if urls != self.sent.get(pool, frozenset()):
                self.sent[pool] = urls
                self.sink.set_endpoints(pool, sorted(urls))


def _name(obj: JSON) -> str | None:
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) and name else None


class SliceSource(Protocol):
    def endpoint_slices(self, namespace: str, label_selector: str) -> Collection: ...


@dataclass
class _Watched:
    store: ServiceEndpoints
    watch: ListWatch
    task: asyncio.Task[None]


class EndpointWatches:
    """One EndpointSlice watch per Service in use, shared by every pool that points at it, and
    stopped when the last of them goes (autodiscovered Services come and go)."""

    def __init__(self, source: SliceSource, sink: DiscoverySink, timing: Timing) -> None:
        self._source = source
        self._sink = sink
        self._timing = timing
        self._services: dict[tuple[str, str], _Watched] = {}
        self._pool_service: dict[str, tuple[str, str]] = {}
        self._stopping: set[asyncio.Task[None]] = set()

    def in_sync(self) -> bool:
        return all(watched.watch.in_sync for watched in self._services.values())

    def watch_for(self, namespace: str, service: str) -> ListWatch | None:
        watched = self._services.get((namespace, service))
        return watched.watch if watched else None

    def set_pool(self, pool: str, namespace: str, service: str, port: str | int) -> None:
        """Feed `pool` from the Service's slices (call again when its target changes)."""
        key = (namespace, service)
        if self._pool_service.get(pool, key) != key:
            self.remove_pool(pool)
        watched = self._services.get(key)
        if watched is None:
            store = ServiceEndpoints(self._sink)
            collection = self._source.endpoint_slices(namespace, f"{SERVICE_NAME_LABEL}={service}")
            watch = ListWatch(collection, store, self._timing)
            task = asyncio.create_task(watch.run(), name=f"discovery-slices-{namespace}/{service}")
            task.add_done_callback(_report_crash)
            watched = self._services[key] = _Watched(store, watch, task)
        self._pool_service[pool] = key
        if watched.store.pools.get(pool) != port:
            watched.store.pools[pool] = port
            watched.store.publish()

    def remove_pool(self, pool: str) -> None:
        """Stop feeding `pool` (it is gone: the sink is not told anything about it)."""
        key = self._pool_service.pop(pool, None)
        if key is None:
            return
        watched = self._services[key]
        watched.store.pools.pop(pool, None)
        watched.store.sent.pop(pool, None)
        if not watched.store.pools:
            del self._services[key]
            watched.task.cancel()
            self._stopping.add(watched.task)
            watched.task.add_done_callback(self._stopping.discard)

    async def stop(self) -> None:
        tasks = [w.task for w in self._services.values()] + list(self._stopping)
        self._services.clear()
        self._pool_service.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _report_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("discovery task %s stopped", task.get_name(), exc_info=task.exception())
