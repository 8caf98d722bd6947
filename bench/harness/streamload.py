"""Thousands of long-lived streaming requests, one asyncio.Protocol each (bench/streams_bench.py).

An aiohttp client costs tens of microseconds and a few KiB per open stream, which at 5,000 streams
is a core and tens of MiB of the load generator. Each `_Stream` here sends one pre-rendered request
on its own connection, parses the status line and the chunked framing only, and counts the SSE
events (`data: ` lines) in each chunk. A stream finished normally when its last chunk arrived after
a `data: [DONE]` event, with the events the worker sends (role + tokens + `[DONE]`). Anything else
(a refusal, a reset, a stream cut short) is counted by its reason, never raised.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from typing import cast

from harness.rawload import render_request

_HEAD_END = b"\r\n\r\n"
_CODE_RE = re.compile(rb'"code"\s*:\s*"([^"]{1,64})"')
_MAX_ERROR_BODY = 4096


class StreamLoad:
    """Opens streams to one URL and keeps the counts: events arriving, streams open, finished, failed."""

    def __init__(self, url: str, headers: dict[str, str], body: bytes, expected_events: int) -> None:
        self.host, self.port, self.request = render_request(url, headers, body)
        self.expected_events = expected_events
        self.events = 0  # every `data: ` event received, over all streams
        self.open = 0  # streams whose 200 head has arrived and which have not ended
        self.finished = 0  # ended normally: [DONE], the last chunk, the expected number of events
        self.failures: Counter[str] = Counter()  # reason -> streams
        self.connected = 0
        self.streams: list[_Stream] = []
        self.all_ended = asyncio.Event()
        self._started = 0

    def pending(self) -> int:
        """Streams started that have neither their head nor an end yet."""
        return self._started - self.open - self.finished - sum(self.failures.values())

    async def open_streams(self, count: int, per_second: float, max_pending: int = 0) -> None:
        """Starts `count` streams at `per_second` at most, in small batches so that their token
        timers spread over the worker's pacing interval instead of ticking all at once. With
        `max_pending`, a batch waits while that many streams still wait for their head: a server
        that falls behind slows the ramp down instead of piling up new requests."""
        loop = asyncio.get_running_loop()
        batch = max(1, int(per_second / 50))
        start = loop.time()
        behind = 0.0  # seconds the ramp waited for the server, added to the schedule
        for first in range(0, count, batch):
            size = min(batch, count - first)
            while max_pending and self.pending() + size > max_pending:
                await asyncio.sleep(0.01)
                behind += 0.01
            await asyncio.gather(*(self._connect() for _ in range(size)))
            delay = start + behind + (first + size) / per_second - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)

    async def _connect(self) -> None:
        self._started += 1
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await loop.create_connection(lambda: _Stream(self), self.host, self.port)
        except OSError as exc:
            self.fail(f"connect: {type(exc).__name__} errno {exc.errno}")
            return
        self.connected += 1
        self.streams.append(protocol)

    def ended(self) -> None:
        if self.finished + sum(self.failures.values()) >= self._started:
            self.all_ended.set()

    def fail(self, reason: str) -> None:
        self.failures[reason] += 1
        self.ended()

    def close(self) -> None:
        for stream in self.streams:
            stream.abort()


class _Stream(asyncio.Protocol):
    def __init__(self, owner: StreamLoad) -> None:
        self._owner = owner
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._status = b""
        self._chunked = False
        self._events = 0
        self._done_seen = False
        self._over = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._transport.write(self._owner.request)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._over:
            return
        if self._status and self._status != b"200":
            code = _CODE_RE.search(self._buffer)
            self._end(f"HTTP {self._status.decode()} {code.group(1).decode() if code else ''}".rstrip())
        elif self._status:
            self._end(f"cut after {self._events} events" + (f": {type(exc).__name__}" if exc else ""))
        else:
            self._end(f"closed before a head: {type(exc).__name__ if exc else 'EOF'}")

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        if not self._status:
            end = buffer.find(_HEAD_END)
            if end < 0:
                return
            head = bytes(buffer[:end]).lower()
            del buffer[: end + 4]
            self._status = head[9:12]
            self._chunked = b"\r\ntransfer-encoding: chunked" in head
            if self._status == b"200" and self._chunked:
                self._owner.open += 1
        if self._status != b"200" or not self._chunked:
            if len(buffer) > _MAX_ERROR_BODY:
                del buffer[_MAX_ERROR_BODY:]
            return  # an answer that is not a stream: its reason is read when the connection ends
        self._read_chunks()

    def _read_chunks(self) -> None:
        buffer = self._buffer
        pos = 0
        while True:
            line_end = buffer.find(b"\r\n", pos)
            if line_end < 0:
                break
            size = int(bytes(buffer[pos:line_end]).split(b";", 1)[0], 16)
            end = line_end + 2 + size + 2
            if len(buffer) < end:
                break
            if size == 0:
                del buffer[:end]
                self._last_chunk()
                return
            payload = buffer[line_end + 2 : line_end + 2 + size]
            count = payload.count(b"data: ")
            self._events += count
            self._owner.events += count
            if b"data: [DONE]" in payload:
                self._done_seen = True
            pos = end
        del buffer[:pos]

    def _last_chunk(self) -> None:
        owner = self._owner
        owner.open -= 1
        if self._done_seen and self._events == owner.expected_events:
            self._over = True
            owner.finished += 1
            owner.ended()
        else:
            self._end(f"ended with {self._events} events" + ("" if self._done_seen else ", no [DONE]"))
        if self._transport is not None:
            self._transport.close()

    def _end(self, reason: str) -> None:
        if self._over:
            return
        self._over = True
        if self._status == b"200" and self._chunked and self._transport is None:
            self._owner.open -= 1  # cut while open (a normal end decremented it already)
        self._owner.fail(reason)

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()
