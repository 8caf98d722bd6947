"""The list-then-watch loop of one Kubernetes collection, kept alive against a flaky API server.

kubernetes_asyncio's own Watch retries a `410 Gone` only in narrow cases and turns every other
hiccup into an exception for the caller, so this loop owns the protocol: list, then watch from the
list's resourceVersion; follow resourceVersion through events and bookmarks; when a stream ends or
drops, watch again from where it stopped (no re-list); re-list only on 410; back off (capped, with
jitter) while the API server is unreachable or failing, and leave the store alone meanwhile so the
last known state stays in use. Nothing here imports the client library: a `Collection` does the I/O.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger("sluicegate.discovery")

JSON = dict[str, Any]

EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED")


@dataclass(frozen=True)
class Timing:
    list_timeout_s: float = 10.0
    # Asked of the server as timeoutSeconds, so every stream ends and is re-opened now and then.
    watch_timeout_s: int = 300
    # The client's own bound on one stream; above watch_timeout_s so the server ends it first.
    watch_grace_s: float = 15.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    # A stream that ends this soon having delivered nothing counts as a failure: a server (or a
    # proxy) that closes every stream at once must not make us reconnect in a hot loop.
    min_watch_s: float = 1.0


class ApiError(Exception):
    """A non-2xx answer (or an ERROR event) from the API server, from its Status body."""

    def __init__(self, status: int, reason: str = "", message: str = "") -> None:
        super().__init__(f"HTTP {status} {reason}: {message}".rstrip(": "))
        self.status = status
        self.reason = reason
        self.message = message


class Gone(ApiError):
    """410: the resourceVersion we hold is older than the server's history; only a list helps."""


class Collection(Protocol):
    """One query (a kind, a namespace, a label selector) on one API server."""

    description: str

    async def list(self) -> tuple[list[JSON], str]:
        """Every matching object now, and the resourceVersion of that snapshot."""

    def watch(self, resource_version: str) -> AbstractAsyncContextManager[AsyncIterator[JSON]]:
        """The raw watch events after `resource_version`, until the stream ends."""


class Store(Protocol):
    def replace(self, objects: list[JSON]) -> None:
        """The complete set after a list (objects missing from it are gone)."""

    def apply(self, event_type: str, obj: JSON) -> None:
        """One ADDED, MODIFIED or DELETED event."""


class Backoff:
    def __init__(self, initial: float, maximum: float, rng: Callable[[], float] = random.random) -> None:
        self._initial = initial
        self._maximum = maximum
        self._rng = rng
        self.failures = 0

    def next_delay(self) -> float:
        delay: float = min(self._maximum, self._initial * 2.0 ** min(self.failures, 32))
        self.failures += 1
        # Jitter spreads the reconnects of many watches (and many replicas) after an outage.
        return delay * (0.5 + 0.5 * self._rng())

    def reset(self) -> None:
        self.failures = 0


def _resource_version(obj: JSON) -> str | None:
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        rv = metadata.get("resourceVersion")
        if isinstance(rv, str) and rv:
            return rv
    return None


class ListWatch:
    """Keeps `store` in step with `collection` until cancelled; never raises otherwise."""

    def __init__(self, collection: Collection, store: Store, timing: Timing) -> None:
        self.collection = collection
        self.store = store
        self.timing = timing
        self.resource_version: str | None = None
        self.lists = 0
        self.watches = 0
        self._backoff = Backoff(timing.backoff_initial_s, timing.backoff_max_s)
        self._progress = False
        self._known = False
        self._streaming = False

    @property
    def in_sync(self) -> bool:
        """Listed at least once, and watching now (or the last call to the API server did not
        fail). The backoff is not reset before a stream has proved healthy, so it cannot say."""
        return self._known and (self._streaming or self._backoff.failures == 0)

    async def run(self) -> None:
        fresh_list = False
        while True:
            self._progress = False
            try:
                if self.resource_version is None:
                    await self._list()
                    fresh_list = True
                healthy = await self._watch()
                fresh_list = False
                if healthy:
                    self._recovered()
                    continue
                await self._pause("the watch stream ended at once without any event")
            except asyncio.CancelledError:
                raise
            except Gone:
                self.resource_version = None
                if fresh_list:
                    # A 410 right after a list means the server is confused: do not spin on it.
                    await self._pause("410 Gone just after a list")
                else:
                    log.info(
                        "%s: resourceVersion expired (410 Gone); listing again", self.collection.description
                    )
                fresh_list = False
            except ApiError as exc:
                await self._pause(str(exc))
            except (OSError, TimeoutError, ValueError) as exc:
                await self._pause(_describe(exc))
            except Exception as exc:
                # aiohttp's client errors and anything unforeseen: the watch must outlive them all.
                await self._pause(_describe(exc), unexpected=not _is_transport_error(exc))

    async def _list(self) -> None:
        self.lists += 1
        objects, resource_version = await self.collection.list()
        self.store.replace(objects)
        self.resource_version = resource_version
        self._progress = True
        self._known = True

    async def _watch(self) -> bool:
        """One stream; True when it was healthy (delivered something or lasted a while)."""
        assert self.resource_version is not None
        self.watches += 1
        started = time.monotonic()
        async with self.collection.watch(self.resource_version) as events:
            self._streaming = True
            try:
                async for event in events:
                    self._handle(event)
            finally:
                self._streaming = False
        return self._progress or time.monotonic() - started >= self.timing.min_watch_s

    def _handle(self, event: JSON) -> None:
        event_type = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise ValueError(f"watch event without an object (type {event_type!r})")
        if event_type == "ERROR":
            code = obj.get("code")
            status = code if isinstance(code, int) else 500
            error = Gone if status == 410 else ApiError
            raise error(status, str(obj.get("reason") or ""), str(obj.get("message") or ""))
        rv = _resource_version(obj)
        if event_type == "BOOKMARK":
            if rv is not None:
                self.resource_version = rv
                self._progress = True
            return
        if event_type not in EVENT_TYPES:
            log.debug("%s: ignoring a watch event of type %r", self.collection.description, event_type)
            return
        self.store.apply(event_type, obj)
        if rv is not None:
            self.resource_version = rv
        self._progress = True

    def _recovered(self) -> None:
        if self._backoff.failures:
            log.info("%s: the API server answers again", self.collection.description)
        self._backoff.reset()

    async def _pause(self, why: str, *, unexpected: bool = False) -> None:
        broke_midway = self._progress
        if broke_midway:
            # Some events arrived before the failure: it is a fresh problem, not a long outage.
            self._recovered()
        delay = self._backoff.next_delay()
        failures = self._backoff.failures
        # The first failure of a streak, then every 10th, at warning: an outage shows, not floods.
        # A stream that broke after working (a load balancer's idle cut) is routine: info.
        level = logging.WARNING if failures == 1 or failures % 10 == 0 else logging.DEBUG
        if broke_midway and level == logging.WARNING:
            level = logging.INFO
        log.log(
            level,
            "%s: %s (failure %d in a row; %s; retrying in %.1fs)",
            self.collection.description,
            why,
            failures,
            "keeping the last known state" if self._known else "nothing known yet",
            delay,
            exc_info=unexpected,
        )
        await asyncio.sleep(delay)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    # Bounded: error texts can quote whole response bodies.
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def _is_transport_error(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module.startswith("aiohttp") or isinstance(exc, OSError | TimeoutError)
