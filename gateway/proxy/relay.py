"""Relaying a worker's answer to the client: streams event by event as they arrive, the rest whole.

The worker side is the same for every client API (every worker speaks the OpenAI chat contract):
the relay reads each event's JSON to learn usage, finish reason and token timing, and writes it
down in the request's `Outcome`; the client's `ClientStream` decides what bytes the client gets.
It asks nothing of the client's connection but watches it: when the client leaves, the worker
connection is closed at once so the engine stops generating.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from starlette.types import Receive, Send

from gateway.errors import ErrorCode, GatewayError
from gateway.proxy.dialects.base import ClientStream
from gateway.proxy.disconnect import ClientWatch
from gateway.proxy.settlement import Outcome
from gateway.proxy.sse import SSEEvent, SSEParser
from gateway.proxy.upstream import UpstreamResponse
from gateway.proxy.usage import InvalidUsage, Usage, parse_usage
from gateway.proxy.worker_errors import sanitised

STREAM_HEADERS = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    # Stops nginx-style proxies in front of the gateway from buffering the stream.
    (b"x-accel-buffering", b"no"),
)
# A worker event this large is not a token: the relay stops rather than buffer it.
MAX_EVENT_BYTES = 4 * 1024 * 1024


def _note_choices(choices: list[Any], outcome: Outcome) -> None:
    generated = False
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict):
            if delta.get("content") or delta.get("tool_calls") or delta.get("reasoning_content"):
                generated = True
        elif choice.get("text"):
            generated = True
        reason = choice.get("finish_reason")
        if isinstance(reason, str) and reason:
            outcome.finish_reason = reason
    if generated:
        now = time.perf_counter()
        if outcome.first_token_at is None:
            outcome.first_token_at = now
        outcome.last_token_at = now
        outcome.tokens_relayed += 1


def note_usage(report: Any, outcome: Outcome) -> Usage | None:
    """A usage report, checked; a lie marks the outcome and is otherwise ignored."""
    try:
        return parse_usage(report)
    except InvalidUsage:
        outcome.invalid_usage = True
        return None


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
    ) -> None:
        self._upstream = upstream
        self._client = client
        self.outcome = outcome
        self._headers = headers
        self._first_token_deadline = first_token_deadline
        self._idle_timeout_s = idle_timeout_s

    async def run(self, receive: Receive, send: Send) -> None:
        watch = ClientWatch(receive)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self._headers})
            await self._pump(send, watch)
        except asyncio.CancelledError:
            if not watch.caught():
                raise  # someone else's cancellation (shutdown): not ours to swallow
            self.outcome.disconnected = True
        except OSError:
            # The client's socket failed under a send: the same as leaving.
            self.outcome.disconnected = True
        finally:
            await watch.close()
            # Closing (not releasing) drops the worker connection, which is what makes an
            # engine like vLLM abort the generation.
            self._upstream.close()

    async def _pump(self, send: Send, watch: ClientWatch) -> None:
        loop = asyncio.get_running_loop()
        content = self._upstream.response.content
        parser = SSEParser()
        outcome = self.outcome
        batch = Batch()
        failure: GatewayError | None = None
        try:
            async with asyncio.timeout_at(self._first_token_deadline) as deadline:
                while not batch.done:
                    chunk = await content.readany()
                    if not chunk:
                        break
                    events = parser.feed(chunk)
                    if len(parser.pending) > MAX_EVENT_BYTES:
                        outcome.error_reason = "event_too_large"
                        failure = GatewayError(
                            ErrorCode.UPSTREAM_ERROR, "The worker sent an oversized event."
                        )
                        break
                    if not events:
                        continue  # a fragment proves nothing: the deadlines stand
                    # The endpoint's health verdict: it answered in time (only the first counts).
                    self._upstream.report(True)
                    batch = self._process(events)
                    if batch.done:
                        watch.delivered()  # a client that hangs up now has not left early
                    if batch.out:
                        await send({"type": "http.response.body", "body": batch.out, "more_body": True})
                    if batch.usage is not None:
                        # Written to the client's socket: uvicorn's send returns without writing
                        # once the client is gone, but wakes the watch first, whose cancellation
                        # then lands on that send.
                        outcome.relayed_usage = batch.usage
                    failure = batch.failure
                    deadline.reschedule(loop.time() + self._idle_timeout_s)
        except TimeoutError:
            waited = "first token" if outcome.first_token_at is None else "next token"
            outcome.error_reason = "timeout"
            failure = GatewayError(
                ErrorCode.UPSTREAM_TIMEOUT,
                f"The worker stopped sending: timed out waiting for the {waited}.",
            )
        except (aiohttp.ClientError, ValueError):
            # ValueError: aiohttp's chunked-encoding parser on bytes that are not HTTP.
            outcome.error_reason = "stream_broken"
            failure = GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker's stream broke off.")
        if batch.done and failure is None:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        # A stream that timed out or ended before its first event counts against the endpoint; one
        # that failed later had already been judged by its first event.
        self._upstream.report(False)
        if failure is None:
            outcome.error_reason = "stream_truncated"
            failure = GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker's stream ended early.")
        watch.delivered()
        await send({"type": "http.response.body", "body": self._client.failure(failure), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _process(self, events: list[SSEEvent]) -> Batch:
        """The client's bytes for a batch of worker events, and what they said: the end, a
        failure, the last cumulative usage among them."""
        batch = Batch()
        out: list[bytes] = []
        outcome = self.outcome
        client = self._client
        for event in events:
            data = event.data
            if data is None:
                out.append(event.raw)  # comments keep idle connections alive: pass them on
                continue
            if data == b"[DONE]":
                out.append(client.done())
                batch.done = True
                break
            try:
                chunk = orjson.loads(data)
            except orjson.JSONDecodeError:
                continue  # not an event any client API can carry
            if not isinstance(chunk, dict):
                continue
            if "error" in chunk:
                # The worker's own error event, re-told in the client's envelope: it ends the stream.
                outcome.error_reason = "worker_error_event"
                batch.failure = GatewayError(ErrorCode.UPSTREAM_ERROR, _event_message(chunk["error"]))
                batch.done = True
                break
            choices = chunk.get("choices")
            if isinstance(choices, list):
                _note_choices(choices, outcome)
            if "usage" in chunk and chunk["usage"] is not None:
                usage = note_usage(chunk["usage"], outcome)
                if usage is not None:
                    batch.usage = usage
                    if choices == []:
                        outcome.usage = usage  # the final report
            out.append(client.event(chunk, data, event.raw))
        batch.out = b"".join(out)
        return batch


@dataclass(slots=True)
class Batch:
    out: bytes = b""
    done: bool = False  # the worker said [DONE], or failed with an error event
    failure: GatewayError | None = None
    usage: Usage | None = None  # the last cumulative usage report among the events


def _event_message(error: Any) -> str:
    message = error.get("message") if isinstance(error, dict) else error
    if isinstance(message, str) and message.strip():
        return sanitised("The worker failed mid-stream: " + message)
    return "The worker failed mid-stream."


async def read_whole(upstream: UpstreamResponse, *, deadline: float, max_bytes: int) -> bytes:
    """Reads a non-streaming answer (or a stream request's error answer) in full, bounded in
    time and size."""
    response = upstream.response
    try:
        async with asyncio.timeout_at(deadline):
            parts: list[bytes] = []
            size = 0
            while size <= max_bytes:
                part = await response.content.read(65536)
                if not part:
                    break
                parts.append(part)
                size += len(part)
    except TimeoutError:
        raise GatewayError(
            ErrorCode.UPSTREAM_TIMEOUT, "The worker did not finish answering in time."
        ) from None
    except (aiohttp.ClientError, ValueError):
        raise GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker's answer broke off.") from None
    if size > max_bytes:
        raise GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker's answer is larger than the gateway relays.")
    return b"".join(parts)
