"""A worker's error answer, re-told in the gateway's own terms.

Whatever shape a worker's error body has (`{"error": {...}}`, `{"error": "teapot"}`, an integer
`code`, an HTML page, a megabyte of text), the client gets the gateway's envelope: a refusal
(4xx) keeps the worker's status and its message, bounded and stripped of control characters; a
worker that failed (5xx) or refused for reasons that are the gateway's to fix (401, 403, 407:
the gateway's own credentials at the worker) is a 502 / 504.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.errors import ErrorCode, GatewayError, WorkerRejected

MAX_MESSAGE_CHARS = 500
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
# The gateway's business, not the client's: the worker refused the gateway itself.
_GATEWAY_FAULTS = frozenset({401, 403, 407})
# Worker headers a client should see with the error (a busy worker's Retry-After).
_FORWARDED = ("retry-after",)


def _message_of(body: bytes) -> str | None:
    try:
        parsed: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    if not isinstance(error, str) and isinstance(parsed, dict):
        error = parsed.get("message") or parsed.get("detail")
    return error if isinstance(error, str) and error.strip() else None


def sanitised(message: str) -> str:
    """Text someone else chose (a worker's message, a client's model name), fit to echo."""
    text = _CONTROL.sub(" ", message).strip()
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"


def _forwarded(headers: Mapping[str, str]) -> dict[str, str]:
    """Only a plain number of seconds: anything else from a worker is not ours to pass on."""
    out: dict[str, str] = {}
    for name in _FORWARDED:
        value = headers.get(name)
        if value is not None and value.isascii() and value.isdigit() and len(value) <= 9:
            out[name] = value
    return out


def worker_failure(model: str, status: int, body: bytes, headers: Mapping[str, str]) -> GatewayError:
    """The error a client gets for a worker's non-200 answer."""
    forwarded = _forwarded(headers)
    message = _message_of(body)
    said = f": {sanitised(message)}" if message else ""
    if 400 <= status < 500 and status not in _GATEWAY_FAULTS:
        text = sanitised(message) if message else f"The worker for model '{model}' refused the request."
        return WorkerRejected(status, text, headers=forwarded)
    code = ErrorCode.UPSTREAM_TIMEOUT if status == 504 else ErrorCode.UPSTREAM_ERROR
    return GatewayError(
        code, f"The worker for model '{model}' failed (HTTP {status}){said}", headers=forwarded
    )
