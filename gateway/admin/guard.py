"""What every admin route does before and around its handler, in one place: who is calling and
whether any of their roles could allow the route's action (gateway/admin/access.py), the body read
once under the client's body timeout, and the Redis round trips bounded together."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive

from gateway.admin import audit
from gateway.admin.access import Caller, require_some_role
from gateway.admin.deps import AdminDeps
from gateway.errors import ErrorCode, GatewayError, StoreUnavailable
from gateway.http.body import read_body
from gateway.identity.roles import Action

ADMIN_BODY_LIMIT = 64 * 1024
Handler = Callable[[Request, AdminDeps], Awaitable[Response]]
# A route's methods, each with its handler and the action it needs (None: any signed-in caller,
# for /me). A handler that acts on one team checks that team itself (Caller.require).
Methods = dict[str, tuple[Handler, Action | None]]


def json_response(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def guarded(handler: Handler, action: Action | None) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        deps = AdminDeps.of(request.scope)
        try:
            # Admin calls make a few Redis round trips (roles included); bound them together.
            async with asyncio.timeout(4 * deps.settings.redis_timeout_s):
                caller = await deps.access.caller(request)
                require_some_role(caller, action)
        except (StoreUnavailable, TimeoutError):
            raise redis_unavailable() from None
        caller.attach(request.scope)
        # The body first, bounded by the client's body timeout: a slow client is not a Redis
        # outage. Handlers then read it again from memory.
        body = await read_body(request, ADMIN_BODY_LIMIT, deps.settings.body_timeout_s)
        request = Request(request.scope, _replay(body, request.receive))
        try:
            async with asyncio.timeout(4 * deps.settings.redis_timeout_s):
                return await handler(request, deps)
        except (StoreUnavailable, TimeoutError):
            raise redis_unavailable() from None

    return endpoint


def redis_unavailable() -> GatewayError:
    return GatewayError(ErrorCode.REDIS_UNAVAILABLE, "Redis is unavailable; try again shortly.")


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body already read, once; after it, the connection's own messages (a disconnect)."""
    pending = [body]

    async def replay() -> Message:
        if pending:
            return {"type": "http.request", "body": pending.pop(), "more_body": False}
        return await receive()

    return replay


async def json_body(request: Request) -> dict[str, Any]:
    raw = await read_body(request, ADMIN_BODY_LIMIT, AdminDeps.of(request.scope).settings.body_timeout_s)
    try:
        body = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError:
        raise GatewayError(ErrorCode.INVALID_JSON, "The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise GatewayError(ErrorCode.INVALID_REQUEST, "The request body must be a JSON object.")
    return body


def journal(request: Request, deps: AdminDeps) -> audit.RequestJournal:
    """The audit log, for a change this request makes: who (the caller's actor) and from where
    (the address the throttle counts: the peer, or behind a trusted proxy the nearest untrusted
    X-Forwarded-For hop)."""
    caller = Caller.of(request.scope)
    return deps.audit.by(caller.principal.actor(), caller.peer)


def route(path: str, methods: Methods) -> Route:
    """One Route per path: Starlette answers a wrong method with 405 from the first Route whose
    path matches, so split Routes would name only their own methods in `Allow`."""
    handlers = {method: guarded(handler, action) for method, (handler, action) in methods.items()}
    if "GET" in handlers:
        handlers["HEAD"] = handlers["GET"]

    async def endpoint(request: Request) -> Response:
        return await handlers[request.method](request)

    return Route(path, endpoint, methods=list(methods))
