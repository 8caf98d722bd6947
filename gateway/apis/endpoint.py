"""The two shapes of a client API's routes: `ProxyEndpoint`, a main route, the one pipeline
(gateway.proxy.pipeline) with the API's dialect; `SideEndpoint`, a side route (a token count, the
model listings, a stored response: gateway.apis.spec.SideRoute), its errors told once in the API's
envelope. Both are ASGI classes, not functions: Starlette would take a function for a request
handler. `mount(api)`: an API's routes as the app mounts them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from gateway.apis.spec import ClientApi
from gateway.errors import GatewayError
from gateway.http.context import CLIENT_CLOSED, RequestContext
from gateway.proxy.dialect import Dialect
from gateway.state import app_state


class ProxyEndpoint:
    """`wrap_send`: what the API adds to every answer's send (e.g. Anthropic's `request-id`)."""

    def __init__(self, dialect: Dialect[Any], wrap_send: Callable[[Scope, Send], Send] | None = None) -> None:
        self.dialect = dialect
        self.wrap_send = wrap_send

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.wrap_send is not None:
            send = self.wrap_send(scope, send)
        await app_state(scope)["pipeline"].serve(self.dialect, scope, receive, send)


class SideEndpoint:
    """One side route: `ctx.api` set, the handler's answer sent, or its `GatewayError` told in
    `envelope` (the access log says why); a client that left while sending its body is noted as
    gone, and answered nothing. `wrap_send`: as `ProxyEndpoint`'s."""

    def __init__(
        self,
        api: str,
        handle: Callable[[Request, RequestContext], Awaitable[Response]],
        envelope: Callable[[GatewayError], Response],
        wrap_send: Callable[[Scope, Send], Send] | None = None,
    ) -> None:
        self.api = api
        self.handle = handle
        self.envelope = envelope
        self.wrap_send = wrap_send

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = RequestContext.of(scope)
        ctx.api = self.api
        if self.wrap_send is not None:
            send = self.wrap_send(scope, send)
        try:
            response = await self.handle(Request(scope, receive), ctx)
        except GatewayError as error:
            ctx.answered_with(error)
            response = self.envelope(error)
        except ClientDisconnect:
            ctx.status, ctx.outcome = CLIENT_CLOSED, "disconnected"
            return
        await response(scope, receive, send)


def mount(api: ClientApi) -> list[BaseRoute]:
    """The API's main routes, then its side routes (gateway.apis.spec: route precedence)."""
    side: list[BaseRoute] = [
        Route(
            route.path,
            SideEndpoint(route.api, route.handle, api.envelope, api.answer_headers),
            methods=list(route.methods),
        )
        for route in api.side_routes
    ]
    return [*api.routes(), *side]
