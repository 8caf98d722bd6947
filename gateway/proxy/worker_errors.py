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
from urllib.parse import urlsplit

import orjson

from gateway.errors import ErrorCode, GatewayError, WorkerRejected

MAX_MESSAGE_CHARS = 500
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
# A failing worker's text may name where it runs (a proxy in front of it saying which upstream
# refused, a stack trace, aiohttp's "Cannot connect to host vllm-0.svc:8000 [... ('fd00::5',
# 8000)]"): the client learns the model and pool, never an address. A dotted name with a port
# goes too (a stack trace's `model.py:12` with it: a 5xx's text is the worker's, not the client's).
_ADDRESS = re.compile(
    r"(?i)\b[a-z][a-z0-9+.-]*(?::|%3a)(?://|%2f%2f)[^\s'\"<>]+"  # a URL, also percent-encoded
    r"|(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?(?!\.?\d)"  # an IPv4 address, with its port
    r"|\[[0-9a-f:.]*:[0-9a-f:.]*(?:%[\w.%-]*)?\](?::\d{1,5})?"  # a bracketed IPv6 address
    r"|(?<![\w:.])(?:(?:[0-9a-f]{1,4}:){7}[0-9a-f]{1,4}"  # an IPv6 address written out...
    r"|(?:[0-9a-f]{1,4}:)+:(?:[0-9a-f]{1,4}(?::[0-9a-f]{1,4})*)?|::[0-9a-f]{1,4}(?::[0-9a-f]{1,4})*)"
    r"(?![\w:.])"  # ...or with its zeros left out (`fd00::5`, `::1`; never `std::vector`, `12:30:45`)
    r"|(?<![\w.-])(?:[a-z0-9-]+\.)+[a-z][a-z0-9-]*:\d{1,5}\b"  # a host name with its port
    r"|(?<![\w.-])(?:[a-z0-9-]+\.)+(?:local|internal|svc|lan|corp|intranet)\b"  # an internal name
    r"|\blocalhost(?::\d{1,5})?\b"
)
# ...and the port after one in Python's socket address (`Connect call failed ('10.0.0.5', 8000)`).
_SOCKET_PORT = re.compile(r"<address>', \d{1,5}\b")
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


def without_addresses(text: str) -> str:
    """`text` with every URL and IP address in it replaced by `<address>`."""
    return _SOCKET_PORT.sub("<address>'", _ADDRESS.sub("<address>", text))


def failed_workers_words(message: str) -> str:
    """A failing worker's message, fit to echo: its addresses replaced before it is cut (a cut
    through an address would leave a piece the patterns no longer know), bounded first."""
    return sanitised(without_addresses(message[: 4 * MAX_MESSAGE_CHARS]))


def _without_endpoint(text: str, endpoint: str) -> str:
    """`text` without the address of the worker that said it: its URL, its host and port, and its
    host where that is an address or a dotted name (a one-word name, `vllm`, is a word too)."""
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    for shown in (endpoint.rstrip("/"), parts.netloc, host if "." in host or ":" in host else ""):
        if shown:
            text = text.replace(shown, "<address>")
    return text


def worker_failure(
    model: str,
    status: int,
    body: bytes,
    headers: Mapping[str, str],
    *,
    pool: str | None = None,
    endpoint: str | None = None,
) -> GatewayError:
    """The error a client gets for a worker's non-200 answer. It names the model (and the pool,
    where the model has several), never the endpoint: the client has no business with it.
    `endpoint`: the URL of the worker that answered."""
    forwarded = _forwarded(headers)
    message = _message_of(body)
    if message and endpoint:
        message = _without_endpoint(message[: 4 * MAX_MESSAGE_CHARS], endpoint)
    where = f"model '{model}'" if pool is None or pool == model else f"model '{model}' (pool '{pool}')"
    if 400 <= status < 500 and status not in _GATEWAY_FAULTS:
        # A refusal is about the request: the worker's own words, which may quote the request's
        # own URLs (an image it could not fetch), go back as they are, but for the address of
        # the worker itself (a proxy in front of it naming its upstream).
        text = sanitised(message) if message else f"The worker for {where} refused the request."
        return WorkerRejected(status, text, headers=forwarded)
    said = f": {failed_workers_words(message)}" if message else ""
    code = ErrorCode.UPSTREAM_TIMEOUT if status == 504 else ErrorCode.UPSTREAM_ERROR
    return GatewayError(code, f"The worker for {where} failed (HTTP {status}){said}", headers=forwarded)
