"""`ProxyEndpoint`: a client API's main route, the one pipeline (gateway.proxy.pipeline) with the
API's dialect."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.types import Receive, Scope, Send

from gateway.proxy.dialect import Dialect
from gateway.state import app_state


class ProxyEndpoint:
    """An ASGI class, not a function: Starlette would take a function for a request handler.
    `wrap_send`: what the API adds to every answer's send (e.g. Anthropic's `request-id`)."""

    def __init__(self, dialect: Dialect[Any], wrap_send: Callable[[Scope, Send], Send] | None = None) -> None:
        self.dialect = dialect
        self.wrap_send = wrap_send

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.wrap_send is not None:
            send = self.wrap_send(scope, send)
        await app_state(scope)["pipeline"].serve(self.dialect, scope, receive, send)
