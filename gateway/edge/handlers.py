"""The app's exception handlers (gateway.app): every GatewayError mapped to its status and
envelope once; Starlette's own 404 and 405 answered in the caller's API family
(gateway/edge/unknown_routes.py); a bug a 500 envelope that names nothing of it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from gateway.edge import unknown_routes
from gateway.edge.unknown_routes import RouteFamily
from gateway.errors import ErrorCode, GatewayError, from_http_status

log = logging.getLogger("sluicegate.app")


async def gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    ctx = request.scope.get("state", {}).get("ctx")
    if ctx is not None:
        ctx.answered_with(exc)  # the access log says why
    return exc.response()


def http_error(families: tuple[RouteFamily, ...]) -> Callable[[Request, Exception], Awaitable[Response]]:
    """`families`: the client APIs' (gateway.apis), each one's own way to answer a path or method
    the gateway does not serve."""

    async def answer(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code in (404, 405):  # no such route, or not this method: in the caller's family
            return unknown_routes.answer(request, exc.status_code, exc.headers, families)
        return from_http_status(exc.status_code, str(exc.detail)).response(exc.headers)

    return answer


async def unexpected_error(request: Request, exc: Exception) -> Response:
    ctx = request.scope.get("state", {}).get("ctx")
    log.error(
        "unhandled error request_id=%s error=%s",
        getattr(ctx, "request_id", "-"),
        type(exc).__name__,
        exc_info=exc,
    )
    return GatewayError(ErrorCode.INTERNAL_ERROR, "Internal error in the gateway.").response()
