"""Reading a request body, bounded in size and in time: the client APIs, the admin API and the
console all read theirs this way."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.types import Scope

from gateway.errors import ErrorCode, GatewayError

# The ASGI scope extension (the gateway's own server, gateway/edge/server.py): a zero-argument
# call saying whether the request's whole body has arrived already.
BODY_ARRIVED_EXTENSION = "sluicegate.body_arrived"


async def read_body(request: Request, max_bytes: int, timeout_s: float) -> bytes:
    """The whole body, bounded in size and in time: a client that declares a body and stops
    sending it would otherwise hold the request, and its connection, forever."""
    too_large = GatewayError(
        ErrorCode.REQUEST_TOO_LARGE, f"The request body is larger than {max_bytes} bytes."
    )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    if _arrived(request.scope):
        # The whole body came with the head (a small one does): reading it cannot wait, so no
        # timer to arm.
        return await _read(request, max_bytes, too_large)
    try:
        async with asyncio.timeout(timeout_s):
            return await _read(request, max_bytes, too_large)
    except TimeoutError:
        raise GatewayError(
            ErrorCode.REQUEST_TIMEOUT,
            f"The request body did not arrive within {timeout_s:g} s.",
            # The rest of the body may still come: this connection cannot carry another request.
            headers={"connection": "close"},
        ) from None


async def _read(request: Request, max_bytes: int, too_large: GatewayError) -> bytes:
    """As Starlette's `request.stream()` reads it, without an async generator per request (each
    one is registered with the event loop and dropped again). The body is read only here."""
    receive = request.receive
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.disconnect":
            raise ClientDisconnect()
        if kind != "http.request":
            continue
        part = message.get("body", b"")
        size += len(part)
        if size > max_bytes:
            raise too_large
        parts.append(part)
        if not message.get("more_body", False):
            return b"".join(parts)


def _arrived(scope: Scope) -> bool:
    extensions: Any = scope.get("extensions")
    arrived = extensions.get(BODY_ARRIVED_EXTENSION) if isinstance(extensions, dict) else None
    return bool(arrived()) if callable(arrived) else False
