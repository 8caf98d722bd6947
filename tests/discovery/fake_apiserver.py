"""A fake Kubernetes API server on a loopback socket, speaking the real wire protocol.

No real API server can run here, so discovery is tested against this one, with the real client
library on the other end. It serves namespaced EndpointSlices and Services: lists (with label
selectors: equality, `in (...)`, `notin`, existence), watches from a resourceVersion (newline-
delimited JSON events, bookmarks, `timeoutSeconds`), one global resourceVersion counter, a history
that can be compacted (then a watch from before it gets `410 Gone`), Status bodies for 401, 404,
410 and 500, and bearer-token authentication. Test controls: create, update and delete objects;
drop or end every open watch stream; compact; answer everything with 500; go down (the port
refuses connections) and come back; and a log of every request to count lists and watches.

It runs on the test's own event loop: tests are `asyncio.run` scenarios.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import secrets
import socket
import ssl
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.discovery.label_selectors import matches, parse_selector

JSON = dict[str, Any]

RESOURCES = {
    # resource: (URL prefix, kind, apiVersion)
    "endpointslices": ("/apis/discovery.k8s.io/v1", "EndpointSlice", "discovery.k8s.io/v1"),
    "services": ("/api/v1", "Service", "v1"),
}


def status_body(code: int, reason: str, message: str) -> JSON:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def status_response(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(status_body(code, reason, message), status=code)


def _parse_bool(value: str | None) -> bool:
    # Go's strconv.ParseBool, as the API server reads query flags (the client sends "True").
    return value in ("1", "t", "T", "TRUE", "true", "True")


# --- the server -----------------------------------------------------------------------------


@dataclass
class Change:
    rv: int
    resource: str
    namespace: str
    type: str  # ADDED, MODIFIED, DELETED
    old: JSON | None
    new: JSON


@dataclass
class RequestRecord:
    resource: str
    namespace: str
    watch: bool
    query: dict[str, str]
    status: int = 0


@dataclass(eq=False)
class _Stream:
    queue: asyncio.Queue[str] = field(default_factory=asyncio.Queue)
    request: web.Request | None = None


class FakeApiServer:
    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl_context = ssl_context
        self.token = "fake-token-" + secrets.token_hex(8)
        self.rv = 1000
        self.objects: dict[tuple[str, str, str], JSON] = {}
        self.history: list[Change] = []
        self.compacted_rv = self.rv  # watches from before this get 410
        self.gone_over_http = False  # 410 as an HTTP status instead of an ERROR event
        self.failing: int | None = None  # answer every request with this status
        self.requests: list[RequestRecord] = []
        self._streams: set[_Stream] = set()
        self._transports: set[asyncio.Transport] = set()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{self.port}"
        self._runner: web.AppRunner | None = None
        self._site: web.SockSite | None = None

    # lifecycle

    async def start(self) -> None:
        app = web.Application(middlewares=[self._middleware])
        app.router.add_get("/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices", self._slices)
        app.router.add_get("/api/v1/namespaces/{namespace}/services", self._services)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        # Cancel a watch handler when its client hangs up, as the real server stops its watcher.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5, handler_cancellation=True)
        await self._runner.setup()
        await self._listen()

    async def _listen(self) -> None:
        assert self._runner is not None
        self._site = web.SockSite(self._runner, self._sock, ssl_context=self._ssl_context)
        await self._site.start()

    async def stop(self) -> None:
        self.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()
        self._sock.close()

    async def go_down(self) -> None:
        """Refuse connections and cut open streams, until `come_back`."""
        assert self._site is not None
        await self._site.stop()
        self._sock.close()
        self.drop_watches()
        # Idle keep-alive connections too: otherwise the client's pool would still reach us.
        for transport in list(self._transports):
            transport.abort()
        self._transports.clear()

    async def come_back(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", self.port))
        await self._listen()

    def write_kubeconfig(self, path: Path, *, namespace: str = "llm", token: str | None = None) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": token or self.token}}],
            "contexts": [
                {"name": "fake", "context": {"cluster": "fake", "user": "tester", "namespace": namespace}}
            ],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
        return path

    # test controls

    def put(self, resource: str, obj: JSON) -> JSON:
        """Create or replace an object (metadata.namespace and name required)."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        key = (resource, meta["namespace"], meta["name"])
        old = self.objects.get(key)
        _, kind, api_version = RESOURCES[resource]
        obj["kind"], obj["apiVersion"] = kind, api_version
        meta["uid"] = old["metadata"]["uid"] if old else str(uuid.uuid4())
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        self.objects[key] = obj
        self._record(Change(self.rv, resource, meta["namespace"], "MODIFIED" if old else "ADDED", old, obj))
        return obj

    def delete(self, resource: str, namespace: str, name: str) -> None:
        old = self.objects.pop((resource, namespace, name))
        self.rv += 1
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(self.rv)
        self._record(Change(self.rv, resource, namespace, "DELETED", old, gone))

    def compact(self) -> None:
        """Forget the history: a watch from any resourceVersion before now gets 410 Gone."""
        self.history.clear()
        self.compacted_rv = self.rv

    def bookmark(self) -> None:
        """Send a BOOKMARK at the current resourceVersion to every stream that allows them."""
        for stream in list(self._streams):
            stream.queue.put_nowait("bookmark")

    def drop_watches(self) -> None:
        """Cut every open watch stream (the connection is aborted mid-stream)."""
        for stream in list(self._streams):
            stream.queue.put_nowait("drop")

    def end_watches(self) -> None:
        """End every open watch stream cleanly, as a server timeout does."""
        for stream in list(self._streams):
            stream.queue.put_nowait("end")

    def lists(self, resource: str | None = None) -> list[RequestRecord]:
        return [r for r in self.requests if not r.watch and resource in (None, r.resource)]

    def watches(self, resource: str | None = None) -> list[RequestRecord]:
        return [r for r in self.requests if r.watch and resource in (None, r.resource)]

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def _record(self, change: Change) -> None:
        self.history.append(change)
        for stream in list(self._streams):
            stream.queue.put_nowait("change")

    # HTTP

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if isinstance(request.transport, asyncio.Transport):
            self._transports = {t for t in self._transports if not t.is_closing()}
            self._transports.add(request.transport)
        if self.failing is not None:
            self.requests.append(RequestRecord("?", "?", "watch" in request.query, dict(request.query), 500))
            return status_response(self.failing, "InternalError", "the fake API server is failing on purpose")
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return status_response(401, "Unauthorized", "Unauthorized")
        response: web.StreamResponse = await handler(request)
        return response

    async def _not_found(self, request: web.Request) -> web.Response:
        return status_response(
            404, "NotFound", f"the server could not find the requested resource ({request.path})"
        )

    async def _slices(self, request: web.Request) -> web.StreamResponse:
        return await self._collection(request, "endpointslices")

    async def _services(self, request: web.Request) -> web.StreamResponse:
        return await self._collection(request, "services")

    async def _collection(self, request: web.Request, resource: str) -> web.StreamResponse:
        namespace = request.match_info["namespace"]
        query = dict(request.query)
        watch = _parse_bool(query.get("watch"))
        record = RequestRecord(resource, namespace, watch, query)
        self.requests.append(record)
        try:
            requirements = parse_selector(query.get("labelSelector", ""))
        except ValueError as exc:
            record.status = 400
            return status_response(400, "BadRequest", str(exc))
        if not watch:
            record.status = 200
            return self._list(resource, namespace, requirements)
        return await self._watch(request, record, requirements)

    def _selected(self, resource: str, namespace: str, requirements: Any, obj: JSON | None) -> bool:
        if obj is None:
            return False
        meta = obj["metadata"]
        return meta["namespace"] == namespace and matches(requirements, meta.get("labels") or {})

    def _list(self, resource: str, namespace: str, requirements: Any) -> web.Response:
        _, kind, api_version = RESOURCES[resource]
        items = []
        for (res, _ns, _name), obj in sorted(self.objects.items()):
            if res == resource and self._selected(resource, namespace, requirements, obj):
                item = copy.deepcopy(obj)
                item.pop("kind"), item.pop("apiVersion")  # list items carry neither, as the real one
                items.append(item)
        body = {
            "kind": f"{kind}List",
            "apiVersion": api_version,
            "metadata": {"resourceVersion": str(self.rv)},
            "items": items,
        }
        return web.json_response(body)

    async def _watch(
        self, request: web.Request, record: RequestRecord, requirements: Any
    ) -> web.StreamResponse:
        resource, namespace = record.resource, record.namespace
        raw_rv = record.query.get("resourceVersion", "")
        bookmarks = _parse_bool(record.query.get("allowWatchBookmarks"))
        timeout = float(record.query.get("timeoutSeconds") or 1800)
        start_rv = int(raw_rv) if raw_rv.isdigit() and raw_rv != "0" else None
        gone = start_rv is not None and start_rv < self.compacted_rv
        if gone and self.gone_over_http:
            record.status = 410
            return status_response(
                410, "Expired", f"too old resource version: {start_rv} ({self.compacted_rv})"
            )
        record.status = 200
        transport = request.transport
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)

        async def send(event_type: str, obj: JSON) -> None:
            await response.write(json.dumps({"type": event_type, "object": obj}).encode() + b"\n")

        if gone:
            expired = status_body(
                410, "Expired", f"too old resource version: {start_rv} ({self.compacted_rv})"
            )
            await send("ERROR", expired)
            return response
        stream = _Stream(request=request)
        self._streams.add(stream)
        cursor = start_rv
        try:
            if cursor is None:
                # No resourceVersion: the current state as ADDED events, then changes.
                for (res, _ns, _name), obj in sorted(self.objects.items()):
                    if res == resource and self._selected(resource, namespace, requirements, obj):
                        await send("ADDED", obj)
                cursor = self.rv
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while True:
                for change in [c for c in self.history if c.rv > cursor]:
                    cursor = change.rv
                    event = self._filter(change, requirements)
                    if change.resource == resource and change.namespace == namespace and event:
                        await send(event, change.new)
                try:
                    signal = await asyncio.wait_for(stream.queue.get(), max(0.0, deadline - loop.time()))
                except TimeoutError:
                    return response  # timeoutSeconds: the stream ends cleanly
                if signal == "drop":
                    if transport is not None:
                        transport.abort()
                    return response
                if signal == "end":
                    return response
                if signal == "bookmark" and bookmarks:
                    cursor = max(cursor, self.rv)
                    _, kind, api_version = RESOURCES[resource]
                    await send(
                        "BOOKMARK",
                        {
                            "kind": kind,
                            "apiVersion": api_version,
                            "metadata": {"resourceVersion": str(cursor)},
                        },
                    )
        except (ConnectionResetError, RuntimeError):
            return response
        finally:
            self._streams.discard(stream)

    def _filter(self, change: Change, requirements: Any) -> str | None:
        """The event a watcher with this selector sees: an object that starts or stops matching
        is ADDED or DELETED for it, as the real watch cache does."""
        was = self._selected(change.resource, change.namespace, requirements, change.old)
        now = self._selected(change.resource, change.namespace, requirements, change.new)
        if change.type == "DELETED":
            return "DELETED" if was else None
        if was and now:
            return "MODIFIED"
        if now:
            return "ADDED"
        if was:
            return "DELETED"
        return None


@contextlib.asynccontextmanager
async def running_apiserver(ssl_context: ssl.SSLContext | None = None) -> Any:
    server = FakeApiServer(ssl_context)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
