"""What the client asked for: the request body read within its size limit, checked just enough
to route and meter it, and rewritten for the worker. Fields the gateway does not know pass through.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request

from gateway.errors import ErrorCode, GatewayError
from gateway.ratelimit import Reservation


@dataclass(frozen=True, slots=True)
class CallKind:
    path: str
    input_field: str
    can_stream: bool


CHAT = CallKind("/v1/chat/completions", "messages", can_stream=True)
COMPLETIONS = CallKind("/v1/completions", "prompt", can_stream=True)
EMBEDDINGS = CallKind("/v1/embeddings", "input", can_stream=False)


@dataclass(frozen=True, slots=True)
class Call:
    kind: CallKind
    payload: dict[str, Any]
    raw: bytes
    model: str
    stream: bool
    wants_usage: bool  # the client itself asked for the streamed usage chunk

    def upstream_body(self, wire_model: str) -> bytes:
        """The body sent to the worker: the name the worker serves, and streamed usage always on.
        Unchanged bytes when there is nothing to change."""
        if not self.stream and self.model == wire_model:
            return self.raw
        payload = dict(self.payload)
        payload["model"] = wire_model
        if self.stream:
            options = self.payload.get("stream_options") or {}
            payload["stream_options"] = {**options, "include_usage": True}
        return orjson.dumps(payload)

    def reservation(self, default_max_tokens: int) -> Reservation:
        """What admission charges token limits before the real usage is known."""
        cap = self.payload.get("max_completion_tokens") or self.payload.get("max_tokens")
        completion = 0 if self.kind is EMBEDDINGS else (cap if isinstance(cap, int) else default_max_tokens)
        return Reservation(self.estimated_prompt_tokens(), completion)

    def estimated_prompt_tokens(self) -> int:
        """~4 characters a token: for reservations, and for a stream that ended before the
        worker's usage report."""
        text = self.payload.get(self.kind.input_field)
        return max(1, len(orjson.dumps(text)) // 4) if text else 0

    @property
    def user(self) -> str | None:
        user = self.payload.get("user")
        return user if isinstance(user, str) else None


async def read_body(request: Request, max_bytes: int) -> bytes:
    too_large = GatewayError(
        ErrorCode.REQUEST_TOO_LARGE, f"The request body is larger than {max_bytes} bytes."
    )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > max_bytes:
            raise too_large
        parts.append(part)
    return b"".join(parts)


def parse_call(raw: bytes, kind: CallKind) -> Call:
    try:
        payload = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise GatewayError(ErrorCode.INVALID_JSON, "The request body is not valid JSON.") from None
    if not isinstance(payload, dict):
        raise GatewayError(ErrorCode.INVALID_REQUEST, "The request body must be a JSON object.")
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise _field_error("model", "is required and must be a non-empty string")
    if kind.input_field not in payload:
        raise _field_error(kind.input_field, "is required")
    _check_input(kind, payload[kind.input_field])
    stream = payload.get("stream", False)
    if not isinstance(stream, bool) and stream is not None:
        raise _field_error("stream", "must be a boolean")
    stream = bool(stream)
    if stream and not kind.can_stream:
        raise _field_error("stream", f"is not supported on {kind.path}")
    options = payload.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _field_error("stream_options", "must be an object")
    wants_usage = bool(options and options.get("include_usage") is True)
    for name in ("max_tokens", "max_completion_tokens", "n"):
        value = payload.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise _field_error(name, "must be a non-negative integer")
    return Call(kind, payload, raw, model, stream, wants_usage)


def _check_input(kind: CallKind, value: Any) -> None:
    if kind is CHAT:
        if not isinstance(value, list) or not value:
            raise _field_error("messages", "must be a non-empty list of messages")
        for i, message in enumerate(value):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise _field_error(f"messages[{i}]", "must be an object with a string 'role'")
    elif not isinstance(value, str | list) or value == []:
        raise _field_error(kind.input_field, "must be a string or a non-empty list")


def _field_error(param: str, problem: str) -> GatewayError:
    return GatewayError(ErrorCode.INVALID_REQUEST, f"'{param}' {problem}.", param=param)
