"""The HTTP/1.1 client for the one call every request makes: a POST to a worker.

aiohttp's ClientSession did this before, at about 340,000 instructions per whole answer and 590,000
per 16-token stream (bench/instructions_bench.py's method, on the mock worker): more than half of
a bare proxy's whole request. A worker call needs a small part of what it does (no cookies,
redirects, proxies, compression or multipart), so this client is asyncio's Protocol, httptools'
response parser (what uvicorn already parses requests with) and a keep-alive pool, at about a
tenth of that. Every other call to a worker (a stored response read back, a token count, health
probes, load scrapes) goes through it too (`fetch`), with the same bounds, TLS and retry rule.

Here the keep-alive pool; one connection, its parsing and its bounds, in connection.py.

What it bounds: a response head (`MAX_HEAD_BYTES`, else the answer is not HTTP to us), and the body
it holds unread (reading pauses past `_HIGH_WATER` until the reader takes it). The caller bounds
the time (it wraps the call in its deadline) and the body's whole size.

Errors are a closed set: `Unreachable` (no connection, or a pooled one found closed before the
write; a `LocalExhaustion` when this process had no descriptor or port to connect with),
`Unanswered` (closed after the write, before any answer: never sent again), `Malformed` (bytes that
are not an HTTP answer; `WrongAnswer`, a compressed one or one echoing another request's id) and,
while a body is read, `BrokenOff`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import ssl
from collections.abc import Mapping

from gateway.http.exhaustion import LOCAL_ERRNOS
from gateway.worker.connection import WorkerConnection, WorkerResponse
from gateway.worker.http import (
    LocalExhaustion,
    SmallAnswer,
    Target,
    TooLarge,
    Unreachable,
    parse_target,
    split_url,
)

log = logging.getLogger("sluicegate.upstream")

# Idle pooled worker connections are closed after this: below the workers' own idle close
# (uvicorn's default, and so vLLM's, is 5 s), so the gateway is the side that closes them.
KEEPALIVE_S = 4.0
# A connect that fails for want of this process's own resources says nothing of the worker.
# How long closing the pool waits for its sockets to close.
_CLOSE_WAIT_S = 1.0
# Parsed worker URLs kept: endpoints come and go with discovery, so the cache starts over past this.
_TARGETS_KEPT = 1024


class WorkerClient:
    """Keep-alive connections per worker (scheme, host, port), opened on demand, closed after
    KEEPALIVE_S idle."""

    def __init__(self, *, keepalive_s: float = KEEPALIVE_S) -> None:
        self._keepalive_s = keepalive_s
        self._idle: dict[tuple[str, str, int], list[WorkerConnection]] = {}
        self._targets: dict[str, Target] = {}
        self._sweep: asyncio.TimerHandle | None = None
        # One TLS context per target (scheme, host, port): a target's CA or client certificate
        # is its own, never another worker's.
        self._ssl: dict[tuple[str, str, int], ssl.SSLContext] = {}
        # Targets verified against a CA file of their own (an overflow provider's `ca_file`), kept
        # apart from `_ssl`, whose cache starts over.
        self._pinned: dict[tuple[str, str, int], ssl.SSLContext] = {}
        self._closing = False
        # Every connection until its transport reports it lost: the pool's shutdown waits for them.
        self._open: set[WorkerConnection] = set()
        self._all_lost: asyncio.Event | None = None

    async def post(
        self,
        url: str,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        connect_s: float,
        method: bytes = b"POST",
    ) -> WorkerResponse:
        """Sends the request; returns the answer once its head arrived.

        A request is sent again, once, on a new connection only when no byte of it can have
        been read: the pooled connection was found closed before the write (the worker's
        keep-alive ran out, it restarted), or sat idle past the keep-alive (`_pooled` drops it
        unused). A connection that closes after the write, before any answer, is `Unanswered`:
        the worker may have read the request (and generated, or stored a response), so it is
        never sent twice. Where the worker echoes `x-request-id`, an answer echoing another id
        is refused (`WrongAnswer`) and its connection closed."""
        target = self._targets.get(url)
        if target is None:
            if len(self._targets) >= _TARGETS_KEPT:
                self._targets.clear()
            target = self._targets[url] = parse_target(url)
        head = _head(method, target, path, headers, len(body))
        request_id = headers.get("x-request-id")
        conn = self._pooled(target)
        if conn is not None:
            try:
                return await conn.request(head, body, request_id)
            except Unreachable:  # raised before the write only (not Unanswered)
                log.info("stale worker connection, retried on a new one")
        conn = await self._connect(target, connect_s)
        return await conn.request(head, body, request_id)

    async def fetch(
        self,
        method: str,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        connect_s: float,
        max_bytes: int,
    ) -> SmallAnswer:
        """A short call's whole answer; `TooLarge` past `max_bytes`. The caller bounds the time.
        A connection whose answer was read whole goes back to the pool."""
        base, path = split_url(url)
        response = await self.post(base, path, body, headers, connect_s=connect_s, method=method.encode())
        try:
            parts: list[bytes] = []
            size = 0
            while part := await response.content.readany():
                size += len(part)
                if size > max_bytes:
                    raise TooLarge(f"an answer past {max_bytes} bytes")
                parts.append(part)
        except BaseException:
            response.close()
            raise
        response.release()
        return SmallAnswer(response.status, b"".join(parts), response.headers)

    def trust(self, url: str, context: ssl.SSLContext) -> None:
        """Connections to `url`'s target use `context` (an overflow provider's own CA, made by
        `ssl.create_default_context(cafile=...)`, which verifies) instead of the default store's."""
        self._pinned[parse_target(url).key] = context

    async def aclose(self) -> None:
        """Closes every connection, and waits (a little) until their sockets are closed: a loop
        that stops before then leaves them open."""
        self._closing = True
        if self._sweep is not None:
            self._sweep.cancel()
        self._idle.clear()
        if self._open:
            self._all_lost = asyncio.Event()
            for conn in list(self._open):
                conn.close()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_CLOSE_WAIT_S):
                    await self._all_lost.wait()

    def _pooled(self, target: Target) -> WorkerConnection | None:
        conns = self._idle.get(target.key)
        if not conns:
            return None
        conn = conns.pop()  # the most recently used: the least likely to have been closed
        if conn.closed or asyncio.get_running_loop().time() - conn.idle_since > self._keepalive_s:
            # The rest idled longer still.
            conn.close()
            for old in conns:
                old.close()
            conns.clear()
            return None
        return conn

    async def _connect(self, target: Target, connect_s: float) -> WorkerConnection:
        loop = asyncio.get_running_loop()
        context = None
        if target.tls:
            context = self._pinned.get(target.key) or self._ssl.get(target.key)
            if context is None:
                if len(self._ssl) >= _TARGETS_KEPT:
                    self._ssl.clear()
                context = self._ssl[target.key] = ssl.create_default_context()
        try:
            async with asyncio.timeout(connect_s):
                _, conn = await loop.create_connection(
                    lambda: WorkerConnection(self, target),
                    target.host,
                    target.port,
                    ssl=context,
                    server_hostname=target.host if target.tls else None,
                )
        except TimeoutError:
            raise Unreachable("connecting timed out") from None
        except OSError as exc:
            if exc.errno in LOCAL_ERRNOS:
                raise LocalExhaustion(f"no resources to connect ({errno.errorcode[exc.errno]})") from None
            raise Unreachable(f"connecting failed ({type(exc).__name__})") from None
        return conn

    def pool(self, conn: WorkerConnection) -> None:
        if self._closing:
            conn.close()
            return
        loop = asyncio.get_running_loop()
        conn.idle_since = loop.time()
        self._idle.setdefault(conn.target.key, []).append(conn)
        if self._sweep is None:
            self._sweep = loop.call_at(conn.idle_since + self._keepalive_s, self._swept)

    def opened(self, conn: WorkerConnection) -> None:
        self._open.add(conn)

    def lost(self, conn: WorkerConnection) -> None:
        self._open.discard(conn)
        conns = self._idle.get(conn.target.key)
        if conns and conn in conns:
            conns.remove(conn)
        if self._all_lost is not None and not self._open:
            self._all_lost.set()

    def _swept(self) -> None:
        """Closes connections idle past the keep-alive, and comes back for the next to expire."""
        self._sweep = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        soonest: float | None = None
        for key, conns in list(self._idle.items()):
            kept = []
            for conn in conns:
                if conn.closed or now - conn.idle_since > self._keepalive_s:
                    conn.close()
                else:
                    kept.append(conn)
            if kept:
                self._idle[key] = kept
                first = kept[0].idle_since + self._keepalive_s
                soonest = first if soonest is None else min(soonest, first)
            else:
                del self._idle[key]
        if soonest is not None:
            self._sweep = loop.call_at(soonest, self._swept)


def _head(method: bytes, target: Target, path: str, headers: Mapping[str, str], length: int) -> bytes:
    # Identity: an answer's usage is read from its bytes, which a compressed one hides (the
    # client's own accept-encoding is never forwarded: gateway/proxy/forwarding.py).
    lines = [
        b"%s %s%s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nAccept-Encoding: identity\r\n"
        % (method, target.prefix, path.encode("latin-1"), target.host_header, length)
    ]
    for name, value in headers.items():
        # Client headers come through uvicorn's parser, which refuses line breaks; a value made
        # here must not carry one either (it would be a second header, or a second request).
        if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
            raise ValueError(f"a line break in the worker header {name!r}")
        lines.append(f"{name}: {value}\r\n".encode("latin-1"))
    lines.append(b"\r\n")
    return b"".join(lines)
