"""A lean closed-loop HTTP/1.1 client for saturation phases: one asyncio.Protocol per connection.

The aiohttp client costs about 0.35 ms of CPU per request, so the load generator's core tops out
near 2,000 requests/s: enough to saturate the gateway, not a bare proxy. This client sends a
pre-rendered request, parses only the status line, `content-length` or chunked framing, and sends
the next request from the protocol callback: a few tens of microseconds per request. Non-streamed
answers only; no redirects, no trailers, keep-alive connections that stay open for the phase.
"""

from __future__ import annotations

import asyncio
import time
from typing import cast
from urllib.parse import urlsplit

_HEAD_END = b"\r\n\r\n"


def render_request(url: str, headers: dict[str, str], body: bytes) -> tuple[str, int, bytes]:
    """(host, port, the request's bytes) for a POST of `body` to `url`."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    lines = [f"POST {parts.path or '/'} HTTP/1.1", f"host: {host}:{port}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines.append(f"content-length: {len(body)}")
    return host, port, ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class _Connection(asyncio.Protocol):
    """One client of the closed loop: sends a request whenever the previous answer is complete."""

    def __init__(self, loop_: RawLoop) -> None:
        self._owner = loop_
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._sent_at = 0.0
        self._need = -1  # bytes the body still needs (content-length), or -1 while in the head
        self._chunked = False
        self._status = b"200"
        self._pos = 0  # chunked: where the next chunk-size line starts
        self.idle = asyncio.get_running_loop().create_future()
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if not self.idle.done():
            self.lost = True
            self._owner.errors.append(f"connection lost: {exc!r}")
            self.idle.set_result(None)

    def send(self) -> None:
        if self._transport is None:
            return
        self._sent_at = time.perf_counter()
        self._transport.write(self._owner.request)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        while True:
            if self._need < 0 and not self._chunked:
                end = buffer.find(_HEAD_END)
                if end < 0:
                    return
                head = bytes(buffer[:end]).lower()
                del buffer[: end + 4]
                self._status = head[9:12]
                at = head.find(b"\r\ncontent-length:")
                if at >= 0:
                    line_end = head.find(b"\r\n", at + 2)
                    self._need = int(head[at + 17 : line_end if line_end >= 0 else len(head)])
                elif b"\r\ntransfer-encoding: chunked" in head:
                    self._chunked = True
                    self._pos = 0
                else:
                    self._need = 0
            if self._chunked:
                if not self._skip_chunks():
                    return
            elif len(buffer) < self._need:
                return
            else:
                del buffer[: self._need]
            self._need = -1
            self._chunked = False
            self._done()
            if self.idle.done():
                return

    def _skip_chunks(self) -> bool:
        """Consumes whole chunks; True once the last (empty) chunk and its CRLF are in."""
        buffer = self._buffer
        while True:
            line_end = buffer.find(b"\r\n", self._pos)
            if line_end < 0:
                return False
            size = int(bytes(buffer[self._pos : line_end]).split(b";", 1)[0], 16)
            end = line_end + 2 + size + 2
            if len(buffer) < end:
                return False
            if size == 0:
                del buffer[:end]
                return True
            self._pos = end

    def _done(self) -> None:
        owner = self._owner
        if self._status == b"200":
            owner.latencies.append(time.perf_counter() - self._sent_at)
        else:
            owner.errors.append(f"HTTP {self._status.decode(errors='replace')}")
        if owner.loop.time() < owner.deadline and owner.started < owner.max_requests:
            owner.started += 1
            self.send()
        elif not self.idle.done():
            self.idle.set_result(None)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class RawLoop:
    """`concurrency` keep-alive connections to one URL, each a closed-loop client."""

    def __init__(self, request: bytes, latencies: list[float], max_requests: int) -> None:
        self.request = request
        self.latencies = latencies
        self.errors: list[str] = []
        self.max_requests = max_requests
        self.started = 0
        self.deadline = 0.0
        self.loop = asyncio.get_running_loop()
        self.connections: list[_Connection] = []

    @classmethod
    async def open(
        cls,
        url: str,
        headers: dict[str, str],
        body: bytes,
        concurrency: int,
        latencies: list[float],
        max_requests: int,
    ) -> RawLoop:
        host, port, request = render_request(url, headers, body)
        raw = cls(request, latencies, max_requests)
        for _ in range(concurrency):
            _, protocol = await raw.loop.create_connection(lambda: _Connection(raw), host, port)
            raw.connections.append(protocol)
        return raw

    async def run(self, duration_s: float) -> None:
        """Every connection sends until `duration_s` from now; returns once all are answered."""
        self.deadline = self.loop.time() + duration_s
        for conn in self.connections:
            self.started += 1
            conn.send()
        await asyncio.gather(*(conn.idle for conn in self.connections))

    def close(self) -> None:
        for conn in self.connections:
            conn.close()
