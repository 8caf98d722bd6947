"""Reading a request body, bounded in size and in time: the client APIs, the admin API and the
console all read theirs this way."""

from __future__ import annotations

import asyncio

from starlette.requests import Request

from gateway.errors import ErrorCode, GatewayError


async def read_body(request: Request, max_bytes: int, timeout_s: float) -> bytes:
    """The whole body, bounded in size and in time: a client that declares a body and stops
    sending it would otherwise hold the request, and its connection, forever."""
    too_large = GatewayError(
        ErrorCode.REQUEST_TOO_LARGE, f"The request body is larger than {max_bytes} bytes."
    )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    parts: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for part in request.stream():
                size += len(part)
                if size > max_bytes:
                    raise too_large
                parts.append(part)
    except TimeoutError:
        raise GatewayError(
            ErrorCode.REQUEST_TIMEOUT,
            f"The request body did not arrive within {timeout_s:g} s.",
            # The rest of the body may still come: this connection cannot carry another request.
            headers={"connection": "close"},
        ) from None
    return b"".join(parts)
