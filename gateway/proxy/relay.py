"""Relaying a worker's answer to the client: streams event by event as they arrive, the rest whole.

The worker side does not depend on the client API: the worker's protocol (the chat contract, or
an API it serves natively: gateway.proxy.worker_protocols) reads each event's JSON for usage,
finish reason and token timing, and writes them down in the request's `Outcome`; the client's
`ClientStream` decides what bytes the client gets.
It watches the client's connection: when the client leaves, the worker connection is closed at
once so the engine stops generating.

Every wait is bounded, on both sides. The worker must send its first output within `first_token`,
then more output within `idle` of the last, and end the stream within `stream_total`: comments,
role-only deltas and an event dripped a byte at a time keep nothing alive. Each event is bounded by
`max_event_bytes`. The client must take each write within `idle`, or the shorter write-stall bound:
uvicorn's `send` blocks while the client's socket buffer is full, and a client that stops reading
would otherwise hold its worker slot, and keep the engine generating, for as long as it likes. Such
a client is cut with its worker, and billed the worker's last cumulative count (what the gateway
had read, the worker's bytes already buffered included), not the count that reached the client.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable

import orjson
from starlette.types import Message, Receive, Scope, Send

from gateway.config import Settings
from gateway.drain import Drain
from gateway.errors import ErrorCode, Failure, GatewayError
from gateway.proxy.dialect import ClientStream, StreamTooLarge
from gateway.proxy.disconnect import ClientWatch
from gateway.proxy.settlement import Outcome
from gateway.proxy.sse import SSEEvent, SSEParser
from gateway.proxy.stream_deadlines import StreamDeadlines
from gateway.proxy.upstream import UpstreamResponse
from gateway.proxy.usage import Usage
from gateway.proxy.worker_protocols import CHAT, Batch, WorkerProtocol
from gateway.seams.starlette import direct_send
from gateway.worker.connection import Body
from gateway.worker.http import WorkerHttpError

STREAM_HEADERS = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    # Stops nginx-style proxies in front of the gateway from buffering the stream.
    (b"x-accel-buffering", b"no"),
)


# How long a stream cut by the drain may take to write its last event (well inside the server's
# grace for cut requests, so it is settled before metering is flushed).
SHUTDOWN_WRITE_S = 1.0
# How long a worker connection waits for its answer's end (the chunked body's last chunk) after the
# event that ended the stream, before it goes back to the pool; past it, it is closed.
STREAM_END_LINGER_S = 1.0


class ClientStalled(Exception):
    """The client did not take a write within the idle timeout: it stopped reading."""


class StreamRelay:
    """Re-streams one worker SSE body to the client."""

    def __init__(
        self,
        upstream: UpstreamResponse,
        client: ClientStream,
        outcome: Outcome,
        *,
        headers: list[tuple[bytes, bytes]],
        first_token_deadline: float,
        idle_timeout_s: float,
        stream_deadline: float = math.inf,
        max_event_bytes: int = Settings.max_event_bytes,
        abort_client: Callable[[], None] | None = None,
        protocol: WorkerProtocol = CHAT,
        remember: Callable[[str], Awaitable[None]] | None = None,
        keepalive: bytes | None = None,
        ping_interval_s: float = 15.0,
        drain: Drain | None = None,
        write_stall_s: float = math.inf,
    ) -> None:
        self._drain = drain
        self._write_stall_s = write_stall_s
        # The last cumulative usage the worker reported, reached the client or not.
        self._worker_usage: Usage | None = None
        self._parser = SSEParser(max_event_bytes)
        self._keepalive = keepalive
        self._ping_interval_s = ping_interval_s
        self._upstream = upstream
        self._reader = protocol.reader()
        # Told a response id the worker keeps before the client can see it (and ask for it back).
        self._remember = remember
        self._client = client
        self.outcome = outcome
        self._headers = headers
        self._first_token_deadline = first_token_deadline
        self._idle_timeout_s = idle_timeout_s
        self._stream_deadline = stream_deadline
        self._max_event_bytes = max_event_bytes
        self._abort_client = abort_client
        self._worker_ended = False  # the worker's stream ended as it should ([DONE] or its API's end)

    def _sent_headers(self) -> list[tuple[bytes, bytes]]:
        """Hands the headers over once: a stream can stay open for hours, and its headers need not."""
        headers, self._headers = self._headers, []
        return headers

    async def run(self, receive: Receive, send: Send, scope: Scope | None = None) -> None:
        """`scope`: the request's, where the server may tell of a lost connection itself."""
        watch = ClientWatch(receive, scope)
        try:
            await self._write(
                send, {"type": "http.response.start", "status": 200, "headers": self._sent_headers()}
            )
            # The start went through the middleware; the events need not.
            await self._pump(send if scope is None else direct_send(scope, send), watch)
        except ClientStalled:
            self._bill_worker_usage()
            await self._cut_client(watch)
        except asyncio.CancelledError:
            if watch.caught():
                self.outcome.disconnected = True
            elif self._drain is not None and self._drain.absorbed():
                await self._end_for_shutdown(send, watch)
            else:
                raise  # someone else's cancellation: not ours to swallow
        except OSError:
            # The client's socket failed under a send: the same as leaving.
            self.outcome.disconnected = True
        finally:
            await watch.close()
            if self._worker_ended:
                # The worker ended its stream: its connection can carry the next request (a new
                # one per stream cost a connect, a round trip through the worker, every time).
                self._upstream.release(linger_s=STREAM_END_LINGER_S)
            else:
                # Closing (not releasing) drops the worker connection, which is what makes an
                # engine like vLLM abort the generation.
                self._upstream.close()

    async def _end_for_shutdown(self, send: Send, watch: ClientWatch) -> None:
        """The drain ran out with this stream open: the client gets its API's error event (and the
        end), and the request is settled with what was relayed."""
        assert self._drain is not None
        self.outcome.error_reason = Failure.SHUTDOWN
        watch.delivered()  # a client that hangs up now has not left early
        failure = self._client.failure(self._drain.error())
        # The server gives the cut requests a few seconds (gateway.edge.draining) before metering
        # is flushed: a client that does not take these writes in time is cut, not waited for.
        self._idle_timeout_s = min(self._idle_timeout_s, SHUTDOWN_WRITE_S)
        try:
            await self._write(send, {"type": "http.response.body", "body": failure, "more_body": True})
            await self._write(send, {"type": "http.response.body", "body": b"", "more_body": False})
        except ClientStalled:
            await self._cut_client(watch)
        except OSError:
            self.outcome.disconnected = True

    def _bill_worker_usage(self) -> None:
        """A client cut for not reading is billed what the worker generated, as far as the gateway
        can tell without waiting: the events already buffered from the worker are read first."""
        try:
            buffered = self._upstream.response.content.read_nowait()
        except WorkerHttpError:
            buffered = b""  # a broken stream: what was read before stands
        if buffered:
            events = self._parser.feed(buffered)
            if events:
                usage = self._process(events, Batch()).usage
                if usage is not None:
                    self._worker_usage = usage
        self.outcome.stalled_usage = self._worker_usage

    async def _cut_client(self, watch: ClientWatch) -> None:
        """Ends a client that stopped reading, settled as one that left. No error event: it would
        only wait on the same full buffer."""
        # The client's doing, not the worker's: settled and counted as a departure, not as an
        # upstream error.
        self.outcome.disconnected = True
        await watch.close()  # the cut below is the gateway's doing, not a departure to catch
        if self._abort_client is not None:
            self._abort_client()
            # The transport reports its loss on the next loop turn: let uvicorn see it before this
            # returns, so it does not take the unfinished response for the app's mistake.
            await asyncio.sleep(0)

    async def _write(self, send: Send, message: Message) -> None:
        """A write off the hot path, which the client must take within the idle timeout (or the
        write-stall bound, if shorter)."""
        try:
            async with asyncio.timeout(min(self._idle_timeout_s, self._write_stall_s)):
                await send(message)
        except TimeoutError:
            raise ClientStalled from None

    async def _pump(self, send: Send, watch: ClientWatch) -> None:
        loop = asyncio.get_running_loop()
        upstream = self._upstream
        content = upstream.response.content
        parser = self._parser
        outcome = self.outcome
        idle = self._idle_timeout_s
        stream_deadline = self._stream_deadline
        batch = Batch()
        failure: GatewayError | None = None
        deadlines: StreamDeadlines | None = None
        try:
            async with asyncio.timeout(None) as timer:
                # The worker's first output by first_token, then each next within idle; each write
                # taken by the client within write_s: times written down per event, one timer.
                deadlines = StreamDeadlines(
                    timer,
                    worker_by=self._first_token_deadline,
                    write_s=min(idle, self._write_stall_s),
                    stream_deadline=stream_deadline,
                )
                while not batch.done:
                    if self._keepalive is None:
                        chunk = await content.readany()
                    else:
                        chunk = await self._read_or_ping(content, send)
                    if not chunk:
                        break
                    events = parser.feed(chunk)
                    if events:
                        self._process(events, batch)
                        if batch.stored_id is not None and self._remember is not None:
                            await self._remember(batch.stored_id)
                        if batch.output and upstream.verdict_pending:
                            # The endpoint's health verdict: it answered in time (only the first
                            # counts). Comments alone prove no engine behind them.
                            upstream.served()
                        if batch.done:
                            watch.delivered()  # a client that hangs up now has not left early
                        now = loop.time()
                        if batch.output:
                            deadlines.worker_by = now + idle
                        if batch.usage is not None:
                            self._worker_usage = batch.usage
                        if batch.out:
                            # uvicorn's send waits while the client's socket buffer is full.
                            deadlines.sending_since = now
                            await send({"type": "http.response.body", "body": batch.out, "more_body": True})
                            deadlines.sending_since = None
                        if batch.usage is not None:
                            # Written to the client's socket: uvicorn's send returns without writing
                            # once the client is gone, but wakes the watch first, whose cancellation
                            # then lands on that send.
                            outcome.relayed_usage = batch.usage
                        failure = batch.failure
                    if parser.too_large and not batch.done:
                        outcome.error_reason = Failure.EVENT_TOO_LARGE
                        failure = GatewayError(
                            ErrorCode.UPSTREAM_ERROR, "The worker sent an oversized event."
                        )
                        break
        except TimeoutError:
            if loop.time() >= stream_deadline:
                outcome.error_reason = Failure.STREAM_TOTAL_TIMEOUT
                failure = GatewayError(
                    ErrorCode.UPSTREAM_TIMEOUT, "The stream ran past the model's time limit for a stream."
                )
            elif deadlines is not None and deadlines.sending_since is not None:
                raise ClientStalled from None
            else:
                waited = "first token" if outcome.first_token_at is None else "next token"
                outcome.error_reason = Failure.TIMEOUT
                failure = GatewayError(
                    ErrorCode.UPSTREAM_TIMEOUT,
                    f"The worker stopped sending: timed out waiting for the {waited}.",
                )
        except WorkerHttpError:
            outcome.error_reason = Failure.STREAM_BROKEN
            failure = GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker's stream broke off.")
        finally:
            if deadlines is not None:
                deadlines.close()
        if batch.done and failure is None:
            self._worker_ended = True
            await self._write(send, {"type": "http.response.body", "body": b"", "more_body": False})
            return
        # A stream that timed out or ended before its first output counts against the endpoint; one
        # that failed later had already been judged by its first output.
        provoked = outcome.error_reason in (Failure.EVENT_TOO_LARGE, Failure.STREAM_TOO_LARGE)
        self._upstream.failed(failure, provoked=provoked)
        if failure is None:
            outcome.error_reason = Failure.STREAM_TRUNCATED
            failure = GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker's stream ended early.")
        watch.delivered()
        await self._write(
            send, {"type": "http.response.body", "body": self._client.failure(failure), "more_body": True}
        )
        await self._write(send, {"type": "http.response.body", "body": b"", "more_body": False})

    async def _read_or_ping(self, content: Body, send: Send) -> bytes:
        """The worker's next bytes; while none come, the API's keep-alive event every ping
        interval (the worker's deadlines stand: the outer timer still bounds the wait)."""
        assert self._keepalive is not None
        while True:
            try:
                async with asyncio.timeout(self._ping_interval_s):
                    return await content.readany()
            except TimeoutError:
                await self._write(
                    send, {"type": "http.response.body", "body": self._keepalive, "more_body": True}
                )

    def _process(self, events: list[SSEEvent], batch: Batch) -> Batch:
        """The client's bytes for a batch of worker events, and what they said (the worker's
        protocol reads them): the end, a failure, the last cumulative usage among them. `batch`
        is the stream's one, told afresh each time (one object a stream, not one an event)."""
        batch.done = batch.output = False
        batch.failure = batch.usage = None
        batch.stored_id = None
        out: list[bytes] = []
        outcome = self.outcome
        client = self._client
        reader = self._reader
        for event in events:
            data = event.data
            if data is None:
                # Passed on (they keep the client's proxies from closing an idle connection), but
                # they are not output: the worker's deadline stands.
                out.append(event.raw)
                continue
            if data == b"[DONE]":
                out.append(client.done())
                batch.done = batch.output = True
                break
            try:
                chunk = orjson.loads(data)
            except orjson.JSONDecodeError:
                continue  # not an event any client API can carry
            if not isinstance(chunk, dict):
                continue
            reader.read(chunk, outcome, batch)
            if batch.failure is not None:
                break  # re-told in the client's envelope by the caller
            try:
                out.append(client.event(chunk, data, event.raw))
            except StreamTooLarge:
                outcome.error_reason = Failure.STREAM_TOO_LARGE
                batch.failure = GatewayError(
                    ErrorCode.UPSTREAM_ERROR, "The worker's stream holds more than the gateway relays."
                )
                batch.done = batch.output = True
                break
            if batch.done:
                out.append(client.done())
                break
        batch.out = b"".join(out)
        return batch
