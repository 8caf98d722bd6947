"""A worker's whole answer (a request that does not stream, or a stream request the worker
refused): read in full within its deadline and size, checked, and told to the client in its API's
body. The pipeline's `relay` step for an answer that is not a stream (gateway.proxy.relay relays
one that is); what it learns goes into the settlement's `Outcome`, as the relay's does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.types import Receive, Scope, Send

from gateway.errors import ErrorCode, Failure, GatewayError
from gateway.http.context import CLIENT_CLOSED
from gateway.model_table import ModelConfig
from gateway.proxy.answer_bytes import AnswerBytes, busy
from gateway.proxy.dialect import Call, Dialect
from gateway.proxy.disconnect import client_abort, write_room
from gateway.proxy.remembering import Remembering
from gateway.proxy.settlement import Settlement
from gateway.proxy.upstream import UpstreamResponse
from gateway.proxy.usage import InvalidUsage
from gateway.proxy.worker_errors import worker_failure
from gateway.proxy.worker_protocols import CHAT
from gateway.worker.http import WorkerHttpError

MAX_ANSWER_BYTES = 64 * 1024 * 1024
# More than an answer's status line and headers take: room kept for them beside its body.
_HEAD_BYTES = 16 * 1024


async def read(
    upstream: UpstreamResponse,
    model: ModelConfig,
    head_deadline: float,
    answers: AnswerBytes,
    *,
    stream: bool,
) -> bytes:
    """A whole answer (or a stream request's error answer, within the idle timeout), its bytes
    counted in `answers` until `answer` has given them to the client."""
    deadline = asyncio.get_running_loop().time() + model.timeouts.idle if stream else head_deadline
    done = False
    try:
        body = await read_whole(upstream, deadline=deadline, max_bytes=MAX_ANSWER_BYTES, answers=answers)
        done = True
        return body
    finally:
        # Read whole, the connection goes back to the pool; cut short, it is dropped, which
        # is what makes an engine stop generating.
        if done:
            upstream.release()
        else:
            upstream.close()


async def answer(
    dialect: Dialect[Any],
    call: Call,
    upstream: UpstreamResponse,
    body: bytes,
    settlement: Settlement,
    *,
    answers: AnswerBytes,
    requested: ModelConfig,
    answer_name: str,
    headers: Mapping[str, str],
    remember: Remembering | None,
    scope: Scope,
    receive: Receive,
    send: Send,
) -> None:
    """The client's answer from the worker's `body`; a worker's refusal, or an answer that is no
    JSON object, raises the GatewayError the client gets instead. The body's bytes go back to
    `answers` once the client has it (or will not get it)."""
    try:
        ctx, outcome, response = settlement.ctx, settlement.outcome, upstream.response
        if response.status != 200:
            outcome.error_reason, outcome.error_status = Failure.STATUS, response.status
            raise worker_failure(
                requested.name,
                response.status,
                body,
                response.headers,
                pool=upstream.pool.name,
                endpoint=ctx.endpoint,
            )
        try:
            parsed: Any = orjson.loads(body)
        except orjson.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            outcome.error_reason = Failure.INVALID_JSON
            raise GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker answered with invalid JSON.")
        if call.protocol is CHAT and parsed.get("error") is not None and "choices" not in parsed:
            # An error told with a 200 (some hosted providers do): no answer, and its words (an
            # organisation, a project, a quota) are not the client's to read.
            outcome.error_reason = Failure.WORKER_ERROR_EVENT
            raise GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker answered with an error.")
        try:
            outcome.finish_reason = call.protocol.finish_reason(parsed)
            outcome.usage = call.protocol.usage(parsed)
        except InvalidUsage:
            outcome.invalid_usage = True
            outcome.estimated_completion = dialect.estimated_completion_tokens(parsed)
        stored_id = call.protocol.stored_id(parsed)
        if stored_id is not None and remember is not None:
            await remember(stored_id)
        content = dialect.whole(call, parsed, body, answer_name)
        room = write_room(scope)
        if room is not None and room(len(content) + _HEAD_BYTES):
            # The answer fits in the connection's write buffer as it is: its send cannot wait, so
            # there is no client to time out (and no timer to arm).
            await _send_json(content, headers, send)
            return
        try:
            # uvicorn's send waits while the client's socket buffer is full: a client that stops
            # reading must not hold its request (and its limits) open forever.
            async with asyncio.timeout(requested.timeouts.idle):
                await _send_json(content, headers, send)
        except TimeoutError:
            outcome.disconnected = True
            ctx.status = CLIENT_CLOSED
            abort = client_abort(scope)
            if abort is not None:
                abort()
    finally:
        answers.held -= len(body)


async def _send_json(content: bytes, headers: Mapping[str, str], send: Send) -> None:
    """A 200 JSON answer as Starlette's Response sends it (the headers given, then its length and
    type), without the object and header checks it makes: every whole answer goes out here."""
    raw = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
    raw.append((b"content-length", b"%d" % len(content)))
    raw.append((b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": 200, "headers": raw})
    await send({"type": "http.response.body", "body": content})


async def read_whole(
    upstream: UpstreamResponse, *, deadline: float, max_bytes: int, answers: AnswerBytes | None = None
) -> bytes:
    """Reads a non-streaming answer (or a stream request's error answer) in full, bounded in
    time and size, and with `answers` in what the replica holds: each part is counted as it
    arrives (inline: see gateway.proxy.answer_bytes), all of it given back if the read fails."""
    response = upstream.response
    if response.content.is_eof():
        # The whole answer came with its head (a small one usually does): nothing to wait for,
        # so no timer to arm.
        try:
            body = response.content.read_nowait()
        except WorkerHttpError:
            raise GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker's answer broke off.") from None
        if len(body) > max_bytes:
            raise _too_large()
        if answers is not None:
            if answers.held + len(body) > answers.limit:
                raise busy()
            answers.held += len(body)
        return body
    parts: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout_at(deadline):
            while size <= max_bytes:
                part = await response.content.readany()
                if not part:
                    break
                if answers is not None:
                    if answers.held + len(part) > answers.limit:
                        raise busy()
                    answers.held += len(part)
                parts.append(part)
                size += len(part)
        if size > max_bytes:
            raise _too_large()
    except BaseException as exc:
        if answers is not None:
            answers.held -= size
        if isinstance(exc, TimeoutError):
            raise GatewayError(
                ErrorCode.UPSTREAM_TIMEOUT, "The worker did not finish answering in time."
            ) from None
        if isinstance(exc, WorkerHttpError):
            raise GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker's answer broke off.") from None
        raise
    return b"".join(parts)


def _too_large() -> GatewayError:
    return GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker's answer is larger than the gateway relays.")
