"""Relaying a worker's answer to the client: streams event by event as they arrive, the rest whole.

While a stream runs the relay reads each event's JSON only to learn usage, finish reason and token
timing; bytes go out as soon as an event is complete. It asks nothing of the client's connection
but watches it: when the client leaves, the worker connection is closed at once so the engine
stops generating, and what was relayed so far is what gets metered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from starlette.types import Receive, Scope, Send

from gateway.disconnect import client_gone
from gateway.errors import ErrorCode, GatewayError
from gateway.sse import SSEEvent, SSEParser
from gateway.upstream import UpstreamResponse

DONE_EVENT = b"data: [DONE]\n\n"
STREAM_HEADERS = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    # Stops nginx-style proxies in front of the gateway from buffering the stream.
    (b"x-accel-buffering", b"no"),
)


@dataclass(slots=True)
class RelayOutcome:
    usage: dict[str, Any] | None = None  # the worker's own usage report, when it sent one
    tokens_relayed: int = 0  # events that carried generated text or tool-call deltas
    first_token_at: float | None = None  # perf_counter
    last_token_at: float | None = None
    finish_reason: str | None = None
    error_reason: str | None = None  # why the stream ended badly, a metric label
    disconnected: bool = False

    def note_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self.usage = usage


class ModelRewrite:
    """Puts the client's model name back where the worker wrote its upstream name."""

    __slots__ = ("_pairs",)

    def __init__(self, upstream_name: str, client_name: str) -> None:
        up, client = orjson.dumps(upstream_name), orjson.dumps(client_name)
        self._pairs = (
            (b'"model":' + up, b'"model":' + client),
            (b'"model": ' + up, b'"model": ' + client),
        )

    def apply(self, data: bytes) -> bytes:
        for needle, replacement in self._pairs:
            if needle in data:
                return data.replace(needle, replacement)
        return data


def _count_generated(choices: list[Any], outcome: RelayOutcome) -> None:
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
        if reason:
            outcome.finish_reason = reason
    if generated:
        now = time.perf_counter()
        if outcome.first_token_at is None:
            outcome.first_token_at = now
        outcome.last_token_at = now
        outcome.tokens_relayed += 1


class StreamRelay:
    """An ASGI response that re-streams a worker's SSE body."""

    def __init__(
        self,
        upstream: UpstreamResponse,
        *,
        headers: list[tuple[bytes, bytes]],
        client_wants_usage: bool,
        rewrite: ModelRewrite | None,
        first_token_deadline: float,
        idle_timeout_s: float,
        on_done: Callable[[RelayOutcome], Awaitable[None]],
    ) -> None:
        self._upstream = upstream
        self._headers = headers
        self._client_wants_usage = client_wants_usage
        self._rewrite = rewrite
        self._first_token_deadline = first_token_deadline
        self._idle_timeout_s = idle_timeout_s
        self._on_done = on_done
        self.outcome = RelayOutcome()
        self._delivered = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pump: asyncio.Task[None] | None = None
        watcher: asyncio.Task[None] | None = None
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self._headers})
            pump = asyncio.ensure_future(self._pump(send))
            watcher = asyncio.ensure_future(self._watch_disconnect(receive))
            await asyncio.wait((pump, watcher), return_when=asyncio.FIRST_COMPLETED)
            if pump.done() and not self.outcome.disconnected:
                pump.result()
        except OSError:
            # The client's socket failed under a send: the same as leaving.
            self.outcome.disconnected = True
        finally:
            for task in (pump, watcher):
                if task is not None and not task.done():
                    task.cancel()
            # Closing (not releasing) drops the worker connection, which is what makes an
            # engine like vLLM abort the generation.
            self._upstream.close()
            await self._on_done(self.outcome)

    async def _watch_disconnect(self, receive: Receive) -> None:
        await client_gone(receive)
        if not self._delivered:
            self.outcome.disconnected = True
            self._upstream.response.close()

    async def _pump(self, send: Send) -> None:
        loop = asyncio.get_running_loop()
        content = self._upstream.response.content
        parser = SSEParser()
        saw_done = False
        failure: GatewayError | None = None
        try:
            async with asyncio.timeout_at(self._first_token_deadline) as deadline:
                while True:
                    chunk = await content.readany()
                    if not chunk:
                        break
                    # The endpoint's health verdict: it answered in time (only the first counts).
                    self._upstream.report(True)
                    deadline.reschedule(None)
                    out, saw_done = self._process(parser.feed(chunk), saw_done)
                    # A client that hangs up once [DONE] is on its way has not left early.
                    self._delivered = saw_done
                    if out:
                        await send({"type": "http.response.body", "body": out, "more_body": True})
                    if saw_done:
                        break
                    deadline.reschedule(loop.time() + self._idle_timeout_s)
        except TimeoutError:
            waited = "first token" if self.outcome.first_token_at is None else "next token"
            self.outcome.error_reason = "timeout"
            failure = GatewayError(
                ErrorCode.UPSTREAM_TIMEOUT,
                f"The worker stopped sending: timed out waiting for the {waited}.",
            )
        except aiohttp.ClientError:
            self.outcome.error_reason = "stream_broken"
            failure = GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker's stream broke off.")
        if self.outcome.disconnected:
            # The relay itself closed the worker connection: the client left, the worker did not fail.
            self.outcome.error_reason = None
            return
        # A stream that timed out or ended before its first event counts against the endpoint; one
        # that failed later had already been judged by its first event.
        self._upstream.report(False)
        if failure is None and not saw_done:
            self.outcome.error_reason = "stream_truncated"
            failure = GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker's stream ended early.")
        if failure is not None:
            self._delivered = True
            await send(
                {
                    "type": "http.response.body",
                    "body": failure.sse_event() + DONE_EVENT,
                    "more_body": True,
                }
            )
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _process(self, events: list[SSEEvent], saw_done: bool) -> tuple[bytes, bool]:
        out: list[bytes] = []
        outcome = self.outcome
        for event in events:
            data = event.data
            if data is None:
                out.append(event.raw)  # comments keep idle connections alive: pass them on
                continue
            if data == b"[DONE]":
                out.append(DONE_EVENT)
                saw_done = True
                break
            try:
                chunk = orjson.loads(data)
            except orjson.JSONDecodeError:
                out.append(event.raw)
                continue
            if isinstance(chunk, dict):
                if "error" in chunk:
                    outcome.error_reason = "worker_error_event"
                choices = chunk.get("choices")
                if "usage" in chunk:
                    outcome.note_usage(chunk["usage"])
                    if choices == [] and not self._client_wants_usage:
                        continue  # the usage chunk the gateway asked for, not the client
                if isinstance(choices, list):
                    _count_generated(choices, outcome)
            if self._rewrite is not None:
                out.append(b"data: " + self._rewrite.apply(data) + b"\n\n")
            else:
                out.append(event.raw)
        return b"".join(out), saw_done


# Worker headers a client should see on a whole answer (a full worker's Retry-After).
_FORWARDED_WORKER_HEADERS = ("retry-after",)


@dataclass(frozen=True, slots=True)
class WholeAnswer:
    status: int
    body: bytes
    content_type: str
    usage: dict[str, Any] | None
    forwarded_headers: dict[str, str]

    def failure(self, model: str) -> GatewayError | None:
        """A worker's 4xx with an OpenAI error body is the client's answer; anything else is ours."""
        if self.status >= 500:
            code = ErrorCode.UPSTREAM_TIMEOUT if self.status == 504 else ErrorCode.UPSTREAM_ERROR
            return GatewayError(code, f"The worker for model '{model}' failed (HTTP {self.status}).")
        if self.status != 200 and not _is_error_envelope(self.body):
            return GatewayError(
                ErrorCode.UPSTREAM_ERROR,
                f"The worker for model '{model}' answered HTTP {self.status} without an error body.",
            )
        return None


def _is_error_envelope(body: bytes) -> bool:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(parsed, dict) and isinstance(parsed.get("error"), dict | str)


async def read_whole(
    upstream: UpstreamResponse, *, deadline: float, max_bytes: int, rewrite: ModelRewrite | None
) -> WholeAnswer:
    """Reads a non-streaming answer (or a stream request's error answer) in full."""
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
            body = b"".join(parts)
    except TimeoutError:
        raise GatewayError(
            ErrorCode.UPSTREAM_TIMEOUT, "The worker did not finish answering in time."
        ) from None
    except aiohttp.ClientError:
        raise GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker's answer broke off.") from None
    if len(body) > max_bytes:
        raise GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker's answer is larger than the gateway relays.")
    usage = None
    if response.status == 200:
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker answered with invalid JSON.") from None
        if isinstance(parsed, dict) and isinstance(parsed.get("usage"), dict):
            usage = parsed["usage"]
        if rewrite is not None:
            body = rewrite.apply(body)
    return WholeAnswer(
        status=response.status,
        body=body,
        content_type=response.headers.get("content-type", "application/json"),
        usage=usage,
        forwarded_headers={
            name: response.headers[name] for name in _FORWARDED_WORKER_HEADERS if name in response.headers
        },
    )
