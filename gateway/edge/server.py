"""The gateway's HTTP server: uvicorn on httptools, with the bounds on one client connection that
uvicorn cannot express itself (docs/limits.md, "Limits and timeouts").

httptools buffers a header line however long it grows, and uvicorn starts no timer before a
request's head is complete, so a client could hold memory and a socket forever without the app
ever seeing it. `GuardedHttpToolsProtocol` counts the bytes of each request head (431 and a close
past the cap) and times it (a close past the timeout) from the moment the connection is made, or
for a later request on a keep-alive connection from its first byte: the idle gap before it is
uvicorn's keep-alive timeout. It also gives every request a way to cut its client's connection,
the scope extension `sluicegate.abort`, for a client that stopped reading.

Client connections are capped below the process's descriptor limit (`connection_cap`): at the
limit, accept() fails and uvicorn can take no connection at all, legitimate or not, until idle
sockets time out. A connection past the cap gets a 503 `server_busy` to its first request and is
closed, while the cap leaves descriptors for the worker connections and Redis.

It relies on uvicorn's internals (the parser callbacks and per-connection state of
`HttpToolsProtocol`), through gateway/seams/uvicorn.py, which names them.
"""

from __future__ import annotations

import asyncio
import functools
import resource
import socket
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.config import Settings
from gateway.errors import ErrorCode, GatewayError
from gateway.http.body import BODY_ARRIVED_EXTENSION
from gateway.proxy.disconnect import ABORT_EXTENSION, GONE_EXTENSION, WRITE_ROOM_EXTENSION, GoneHooks
from gateway.seams.starlette import DIRECT_SEND_EXTENSION
from gateway.seams.uvicorn import HttpToolsBase, RequestResponseCycle, status_line

# Requests a client may queue behind the one being answered (HTTP/1.1 pipelining). uvicorn pauses
# reading once one is queued, but every head already in the bytes it read is parsed and queued:
# a client that pipelines tiny requests without reading the answers would grow the queue forever.
MAX_PIPELINED = 16
# Descriptors kept for what is not a client connection: the listening socket, logs, the spool,
# module files, discovery's watches.
_RESERVED_FDS = 64
_LEAST_CONNECTIONS = 16
# How long a connection past the cap waits for its first request (for the 503): not the whole
# head timeout, or a flood of silent connections past the cap would hold descriptors up to the
# very limit the cap keeps off.
_BUSY_GRACE_S = 1.0


def connection_cap(settings: Settings) -> int:
    """Client connections this process takes at once: the setting, or by default what the soft
    descriptor limit leaves after Redis's connections and the reserve, halved (each client request
    may hold one worker connection too). Redis's are bounded twice by redis_max_connections: the
    pool's and the script calls' own (gateway/redis/lean.py)."""
    if settings.max_connections:
        return settings.max_connections
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1_000_000
    return max(_LEAST_CONNECTIONS, (soft - 2 * settings.redis_max_connections - _RESERVED_FDS) // 2)


async def _server_busy(scope: Scope, receive: Receive, send: Send) -> None:
    """The app a connection past the cap is served by: 503 in the envelope, then a close."""
    error = GatewayError(ErrorCode.SERVER_BUSY, "The gateway has too many open connections; retry shortly.")
    body = error.body()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"retry-after", b"1"),
        (b"connection", b"close"),  # uvicorn closes after the answer
    ]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class GuardedHttpToolsProtocol(HttpToolsBase):
    """uvicorn's httptools protocol, with a cap and a timer on each request head, and a cap in time
    on a request body that the app answered before it arrived."""

    max_head_bytes: ClassVar[int]
    head_timeout_s: ClassVar[float]
    body_timeout_s: ClassVar[float]
    max_connections: ClassVar[int]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # True while a request head is expected or arriving; False from its end to its body's end.
        self._head_open = True
        self._head_bytes = 0
        self._heads_completed = 0
        self._bodies_completed = 0  # requests whose whole body has arrived
        # True from a chunk's size line to its first byte: for the last chunk, that is its trailers.
        self._maybe_in_trailers = False
        self._trailer_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._drain_timer: asyncio.TimerHandle | None = None
        self._gone = GoneHooks()  # the watches of this connection's requests (gateway/proxy/disconnect.py)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:  # uvicorn's set of open connections
            self.app = _server_busy  # uvicorn runs each request of this connection on it
            self._head_timer = self.loop.call_later(min(self.head_timeout_s, _BUSY_GRACE_S), self._close)
        # A connection that never sends a byte holds a socket too: its head is timed from now.
        self._start_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)
        self._gone.fire()

    def data_received(self, data: bytes) -> None:
        while data and not self.transport.is_closing():
            data = self._feed_head(data) if self._head_open else self._feed_body(data)

    def _feed_head(self, data: bytes) -> bytes:
        """Feeds what fits under the head cap; returns what is left for after the head."""
        room = self.max_head_bytes - self._head_bytes
        part, rest = data[:room], data[room:]
        self._head_bytes += len(part)
        heads_before = self._heads_completed
        if part:
            super().data_received(part)
        if self._heads_completed == heads_before and not self.transport.is_closing():
            # The head is still arriving: timed from now (the same moment as its first bytes,
            # for a timer that fires seconds later). A head that came whole in this call, as most
            # do, never arms one.
            self._start_head_timer()
        if rest and self._heads_completed == heads_before and not self.transport.is_closing():
            # The head did not end within the cap; httptools would buffer the rest of its line.
            self._refuse(
                GatewayError(
                    ErrorCode.HEADERS_TOO_LARGE,
                    f"The request line and headers are larger than {self.max_head_bytes} bytes.",
                )
            )
        return rest

    def _feed_body(self, data: bytes) -> bytes:
        """Feeds a body in slices, counting what follows its last chunk: trailers are headers that
        httptools buffers as it does the head's, so they come under the same cap."""
        part, rest = data[: self.max_head_bytes], data[self.max_head_bytes :]
        in_trailers = self._maybe_in_trailers
        super().data_received(part)
        if in_trailers and self._maybe_in_trailers:
            self._trailer_bytes += len(part)  # a whole slice with no payload: past the last chunk
            if self._trailer_bytes > self.max_head_bytes:
                # The request is the app's by now, its answer may have begun: only a close fits.
                self._close()
        return rest

    def on_message_begin(self) -> None:
        super().on_message_begin()
        # The app's way to cut this client off (gateway/proxy/disconnect.py), a zero-argument
        # call, and to hear that it is gone without a task waiting on `receive`.
        extensions: dict[str, Any] = {
            ABORT_EXTENSION: self.transport.abort,
            GONE_EXTENSION: self._gone,
            WRITE_ROOM_EXTENSION: self._write_room,
        }
        self.scope["extensions"] = extensions

    def on_headers_complete(self) -> None:
        self._head_open = False
        self._head_bytes = 0
        self._heads_completed += 1
        self._trailer_bytes = 0
        self._cancel_head_timer()
        super().on_headers_complete()
        # For gateway/http/body.py: a body already whole is read without a timer. By count, not
        # through uvicorn's cycle object: a scope that held its cycle would be a reference cycle,
        # every request's left for the garbage collector.
        ordinal = self._heads_completed
        extensions: dict[str, Any] = self.scope["extensions"]
        extensions[BODY_ARRIVED_EXTENSION] = lambda: self._bodies_completed >= ordinal
        # This request's own cycle (a pipelined request's is not `self.cycle` for long): its send,
        # for a stream's events (gateway/seams/starlette.py). Weakly: the cycle holds the scope.
        # A partial over a weak reference, both made in C: every request pays for it.
        extensions[DIRECT_SEND_EXTENSION] = functools.partial(_send_of, weakref.ref(self.cycle))
        if len(self.pipeline) > MAX_PIPELINED:
            self._close()

    def _write_room(self, size: int) -> bool:
        """Whether `size` more bytes fit under the high-water mark: a send that cannot wait."""
        transport = self.transport
        if self.flow is None or self.flow.write_paused or transport.is_closing():
            return False
        return bool(transport.get_write_buffer_size() + size < transport.get_write_buffer_limits()[1])

    def timeout_keep_alive_handler(self) -> None:
        # uvicorn closes gracefully, which waits for the client to read what is buffered: one
        # that never reads would hold the socket and the buffer forever.
        self._close()

    def on_chunk_header(self) -> None:
        self._maybe_in_trailers = True

    def on_body(self, body: bytes) -> None:
        self._maybe_in_trailers = False
        super().on_body(body)

    def on_chunk_complete(self) -> None:
        self._maybe_in_trailers = False

    def on_message_complete(self) -> None:
        self._bodies_completed += 1
        self._head_open = True
        self._maybe_in_trailers = False
        if self._drain_timer is not None:
            # The rest of a body already answered has arrived, and the connection is idle: that is
            # uvicorn's keep-alive timeout to bound again (the body's bytes disarmed it).
            self._cancel_drain_timer()
            self.rearm_keep_alive()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        # With nothing pipelined, the response that just ended is the latest request's. If that
        # request's body is still arriving (the app refused it early: 401, 408, 413), the client
        # may be writing it still: keep reading it so the client sees the answer rather than a
        # reset, but a client that trickles it is cut once the body timeout has passed.
        if (
            not self.pipeline
            and not self._head_open
            and self._drain_timer is None
            and not self.transport.is_closing()
        ):
            self._drain_timer = self.loop.call_later(self.body_timeout_s, self._close)
        super().on_response_complete()

    def send_400_response(self, msg: str) -> None:
        # Bytes that are not HTTP: uvicorn's own answer, in the gateway's envelope.
        self._refuse(GatewayError(ErrorCode.INVALID_REQUEST, "The request is not valid HTTP/1.1."))

    def _refuse(self, error: GatewayError) -> None:
        """An answer from below the app, and the connection closed behind it."""
        if self.cycle is not None and not self.cycle.response_complete:
            self._close()  # a response is on the wire: no room for another in it
            return
        body = error.body()
        head = [status_line(error.status)]
        for name, value in self.server_state.default_headers:
            head.append(name + b": " + value + b"\r\n")
        head.append(b"content-type: application/json\r\n")
        head.append(b"content-length: %d\r\n" % len(body))
        head.append(b"connection: close\r\n\r\n")
        self.transport.write(b"".join(head) + body)
        self._close()

    def _start_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._close)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _cancel_drain_timer(self) -> None:
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None

    def _cancel_timers(self) -> None:
        self._cancel_head_timer()
        self._cancel_drain_timer()

    def _close(self) -> None:
        """Closes at once: a graceful close waits for the client to read what is buffered, which a
        client that stopped reading never does."""
        self._cancel_timers()
        if self.transport.get_write_buffer_size():
            self.transport.abort()
        elif not self.transport.is_closing():
            self.transport.close()


def _send_of(cycle: weakref.ref[RequestResponseCycle]) -> Callable[..., Awaitable[None]] | None:
    """The request's send while its cycle lives (DIRECT_SEND_EXTENSION)."""
    request = cycle()
    return None if request is None else request.send


def guarded_protocol(settings: Settings) -> type[GuardedHttpToolsProtocol]:
    """The protocol class with this gateway's bounds: uvicorn builds one per connection from the
    class alone, so the bounds travel on it."""

    class Guarded(GuardedHttpToolsProtocol):
        max_head_bytes = settings.max_header_bytes
        head_timeout_s = settings.header_timeout_s
        body_timeout_s = settings.body_timeout_s
        max_connections = connection_cap(settings)

    return Guarded


def listen_sockets(settings: Settings) -> list[socket.socket]:
    """The client listener and, with SLUICEGATE_ADMIN_PORT, the admin one, bound here so that one
    uvicorn server serves both (one lifespan, one drain: gateway/edge/planes.py). SO_REUSEADDR, as
    uvicorn binds: a gateway restarted a moment ago is not refused its port by TIME_WAIT."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    ports = [settings.port] if settings.admin_port is None else [settings.port, settings.admin_port]
    sockets: list[socket.socket] = []
    try:
        for port in ports:
            sockets.append(socket.create_server((settings.host, port), family=family, backlog=2048))
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def uvicorn_config(
    app: ASGIApp,
    settings: Settings,
    *,
    loop: str = "uvloop",
    graceful_shutdown_s: int = 30,
    log_level: str | None = None,
) -> uvicorn.Config:
    """The one uvicorn configuration of the gateway, for `sluicegate serve`, the demo and the tests
    alike (which differ only in the event loop: tests run on asyncio)."""
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop=loop,
        http=guarded_protocol(settings),
        # No WebSocket route exists; an upgrade must not hand the socket to an unguarded protocol.
        ws="none",
        # Who the client is comes from the socket: the gateway weighs X-Forwarded-For itself,
        # against its own trusted proxies (gateway/proxy/forwarding.py), never uvicorn's list.
        proxy_headers=False,
        lifespan="on",
        # uvicorn hands it to loop.call_later, which takes fractions of a second too.
        timeout_keep_alive=settings.keep_alive_timeout_s,  # type: ignore[arg-type]
        timeout_graceful_shutdown=graceful_shutdown_s,
        # Our own access log (gateway/edge/middleware.py) has the request id; uvicorn's does not.
        access_log=False,
        # uvicorn's records reach the root logger, configured by gateway/observability/logs.py.
        log_config=None,
        log_level=log_level,
    )
