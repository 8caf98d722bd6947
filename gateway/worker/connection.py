"""One worker connection of the worker call's HTTP/1.1 client (gateway/worker/client.py,
which keeps them): the request it carries, the answer's head parsed by httptools, and its body
as it arrives, with the bounds the client's docstring gives (its errors and target: http.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol, cast

import httptools

from gateway.worker.http import (
    BrokenOff,
    Malformed,
    Target,
    Unanswered,
    Unreachable,
    WorkerHttpError,
    WrongAnswer,
)

# A response head past these is no answer we read: a header line (aiohttp's bound), and the head.
MAX_HEADER_LINE = 8190
MAX_HEAD_BYTES = 64 * 1024
# Body bytes held for a reader that does not take them: reading from the worker pauses above the
# high mark and resumes once the reader has taken all but the low mark.
_HIGH_WATER = 256 * 1024
_LOW_WATER = 64 * 1024


class ConnectionPool(Protocol):
    """What a connection tells the client that keeps it."""

    def pool(self, conn: WorkerConnection) -> None:
        """Back in the pool, to carry the next request."""

    def opened(self, conn: WorkerConnection) -> None: ...

    def lost(self, conn: WorkerConnection) -> None: ...


class Body:
    """The answer's body as it arrives; the reader side of the connection's flow control."""

    __slots__ = ("_chunks", "_conn", "_error", "_size", "_waiter", "done")

    def __init__(self, conn: WorkerConnection) -> None:
        self._conn = conn
        self._chunks: list[bytes] = []
        self._size = 0
        self._error: WorkerHttpError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.done = False  # the whole body arrived

    def is_eof(self) -> bool:
        """Nothing more will arrive: the body is whole, or it broke off."""
        return self.done or self._error is not None

    def read_nowait(self) -> bytes:
        """What arrived and was not read yet; raises BrokenOff once that is all and it broke off."""
        chunks = self._chunks
        if not chunks:
            if self._error is not None:
                raise self._error
            return b""
        self._chunks = []
        if self._size > _LOW_WATER:
            self._conn.resume()
        self._size = 0
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def readany(self) -> bytes:
        """The next bytes, as soon as any arrive; b"" at the body's end."""
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self.done:
                return b""
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        # read_nowait, inlined: a stream reads once per event.
        chunks = self._chunks
        self._chunks = []
        if self._size > _LOW_WATER:
            self._conn.resume()
        self._size = 0
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _end(self, error: WorkerHttpError | None) -> None:
        if error is None:
            self.done = True
        elif not self.done:
            self._error = error
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class WorkerResponse:
    """A worker's answer, from its head on. The caller must `release()` or `close()` it."""

    __slots__ = ("_conn", "content", "headers", "status")

    def __init__(self, conn: WorkerConnection, status: int, headers: dict[str, str]) -> None:
        self._conn: WorkerConnection | None = conn
        self.status = status
        self.headers: Mapping[str, str] = headers  # names in lower case
        self.content = Body(conn)

    def is_event_stream(self) -> bool:
        media_type = self.headers.get("content-type", "").partition(";")[0]
        return media_type.strip().lower() == "text/event-stream"

    def release(self, *, linger_s: float = 0.0) -> None:
        """Done with it: a connection whose answer was read whole goes back to the pool. With
        `linger_s`, one whose answer has not ended yet (a stream's last chunk still on its way
        after the event that ended the stream) waits that long for the end, then goes back."""
        conn, self._conn = self._conn, None
        if conn is None:  # once: by then the connection may carry another request
            return
        if self.content.done or linger_s <= 0:
            conn.finished(reuse=self.content.done)
        else:
            conn.linger(linger_s)

    def close(self) -> None:
        """Done with it, dropping the connection (an engine aborts the generation then)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.finished(reuse=False)


class WorkerConnection(asyncio.Protocol):
    """One worker connection, with at most one request on it at a time."""

    __slots__ = (
        "_client",
        "_fed_body",
        "_head_bytes",
        "_head_waiter",
        "_header_bytes",
        "_headers",
        "_heard",
        "_keep_alive",
        "_linger",
        "_parser",
        "_paused",
        "_request_id",
        "_response",
        "_until_close",
        "closed",
        "idle_since",
        "target",
        "transport",
    )

    def __init__(self, client: ConnectionPool, target: Target) -> None:
        self._client = client
        self.target = target
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._headers: dict[str, str] = {}
        # The bytes of reads that held no body (a head not yet whole, or trailers) in a row.
        self._head_bytes = 0
        self._header_bytes = 0  # the header lines parsed
        self._head_waiter: asyncio.Future[WorkerResponse] | None = None
        self._response: WorkerResponse | None = None
        self._keep_alive = False
        self._until_close = False
        self._paused = False
        self._heard = False  # a byte of the answer arrived
        self._fed_body = False  # the read being parsed held body bytes
        # Waiting for the end of an answer its reader is done with (`linger`): its deadline.
        self._linger: asyncio.TimerHandle | None = None
        # The request's x-request-id: an answer that echoes another is refused (a late answer).
        self._request_id: str | None = None
        self.closed = False
        self.idle_since = 0.0

    # The caller's side.

    async def request(self, head: bytes, body: bytes, request_id: str | None = None) -> WorkerResponse:
        """Sends the request, returns the answer once its head arrived. `Unreachable` when the
        connection was found closed before a byte was written (the only case a caller may send
        the request again); `Unanswered` when it closed after the write, before any answer."""
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            raise Unreachable("the connection closed")
        self._request_id = request_id
        waiter: asyncio.Future[WorkerResponse] = asyncio.get_running_loop().create_future()
        self._head_waiter = waiter
        self._headers, self._head_bytes, self._header_bytes, self._response = {}, 0, 0, None
        self._heard = self._fed_body = False
        self._keep_alive = self._until_close = False
        try:
            # Head and body in one write (writev): in two, the worker woke for a head alone, and
            # read its body on a second wake-up, on every request.
            transport.writelines((head, body))
            return await waiter
        except BaseException:
            # Cancelled (a deadline, the client left) or failed before the head: the connection
            # is mid-answer and can carry nothing else.
            self._head_waiter = None
            self.close()
            raise

    def finished(self, *, reuse: bool) -> None:
        if self._linger is not None:
            self._stop_lingering()
        self._response = None
        # A connection paused for an unread body stays paused: it would never read the next answer.
        if reuse and self._keep_alive and not self.closed and not self._paused:
            self._client.pool(self)
        else:
            self.close()

    def linger(self, seconds: float) -> None:
        """Keeps the connection until its answer ends, reading nothing more: then it goes back to
        the pool. A body byte meanwhile (there should be none), or no end within `seconds`, closes
        it: a worker that never ends its answer holds the connection that long at most."""
        response = self._response
        if self.closed or self._paused or response is None or response.content._chunks:
            self.finished(reuse=False)  # unread bytes after the stream's end: not reusable
            return
        self._linger = asyncio.get_running_loop().call_later(seconds, self.close)

    def _lingered(self) -> None:
        """After a read while lingering: the answer's end pools the connection; body bytes close it."""
        content = self._response.content if self._response is not None else None
        if content is None or content._chunks:
            self.finished(reuse=False)
        elif content.done:
            self.finished(reuse=True)

    def _stop_lingering(self) -> None:
        assert self._linger is not None
        self._linger.cancel()
        self._linger = None

    def close(self) -> None:
        if self._linger is not None:
            self._stop_lingering()
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()

    def pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    # asyncio's side.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport is not an asyncio.Transport subclass, though it is one in kind.
        self.transport = cast(asyncio.Transport, transport)
        self._client.opened(self)

    def data_received(self, data: bytes) -> None:
        response = self._response
        if self._head_waiter is None and (response is None or response.content.done):
            self.close()  # bytes nobody asked for: this connection cannot be trusted with a request
            return
        self._heard = True
        self._fed_body = False
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            self._fail(Malformed("not an HTTP answer") if self._response is None else BrokenOff("not HTTP"))
            return
        if self._response is None or not self._fed_body:
            # httptools keeps a header line however long it grows until it ends: bytes that are
            # no body (a head, or trailers, that never end) are bounded here; on_header bounds
            # the lines that do end.
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                too_large = "the answer's head is too large"
                self._fail(Malformed(too_large) if self._response is None else BrokenOff(too_large))
        else:
            self._head_bytes = 0
        if self._linger is not None and not self.closed:
            self._lingered()

    def eof_received(self) -> bool | None:
        return None  # close the transport: connection_lost settles what was in flight

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._client.lost(self)
        response = self._response
        if response is not None and self._until_close and not response.content.done:
            response.content._end(None)  # an answer with no length ends with its connection
            return
        closed = "the worker closed the connection"
        if response is not None:
            self._fail(BrokenOff(closed))
        elif self._heard:
            # Part of an answer came: the worker read the request, so it is not sent again.
            self._fail(Malformed(closed + " in the middle of its answer's head"))
        elif self._head_waiter is not None:
            # The request went out (request() checks the connection before it writes): the worker
            # may have read it, and it is not sent again.
            self._fail(Unanswered(closed + " without answering"))
        else:
            self._fail(Unreachable(closed))

    def _fail(self, error: WorkerHttpError) -> None:
        waiter, self._head_waiter = self._head_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        elif self._response is not None:
            self._response.content._end(error)
        self.close()

    # httptools' callbacks.

    def on_message_begin(self) -> None:
        if self._response is not None:
            # More bytes after the answer, in the same read: never left for the next request.
            raise Malformed("a second answer")

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._response is not None:
            return  # a trailer: not the answer's head (data_received bounds its bytes)
        # Raised here, feed_data fails with it (data_received closes the connection).
        size = len(name) + len(value)
        if size > MAX_HEADER_LINE:
            raise Malformed("a header line is too long")
        self._header_bytes += size
        if self._header_bytes > MAX_HEAD_BYTES:
            raise Malformed("the answer's head is too large")
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status < 200:
            self._headers = {}  # an informational answer (100, 103): the real one follows
            return
        headers = self._headers
        refused = _refused(headers, self._request_id)
        if refused is not None:
            self._fail(WrongAnswer(refused))  # closes the connection: nothing more is read from it
            return
        coding = headers.get("transfer-encoding", "").rstrip().lower()
        self._until_close = "content-length" not in headers and not coding.endswith("chunked")
        response = WorkerResponse(self, status, headers)
        self._response = response
        waiter, self._head_waiter = self._head_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(response)

    def on_body(self, data: bytes) -> None:
        # Body's side of it, inlined: one call per chunk of every stream.
        if self._response is None:
            return
        self._fed_body = True
        body = self._response.content
        body._chunks.append(data)
        body._size += len(data)
        if body._size > _HIGH_WATER:
            self.pause()
        waiter = body._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def on_message_complete(self) -> None:
        response = self._response
        if response is None:
            return  # the end of an informational answer
        self._keep_alive = self._parser.should_keep_alive()
        response.content._end(None)


def _refused(headers: Mapping[str, str], request_id: str | None) -> str | None:
    """Why an answer's head is not served, or None: compressed though the request asked for
    identity (its usage could not be read), or the answer to another request."""
    encoding = headers.get("content-encoding")
    if encoding is not None and encoding.strip().lower() not in ("", "identity"):
        return "a compressed answer (content-encoding), though identity was asked for"
    echoed = headers.get("x-request-id")
    if echoed is not None and request_id is not None and echoed != request_id:
        return "an answer echoing another request's x-request-id"
    return None
