"""The server's own `send` for a response, beneath the app's middleware: for a stream's events.

Each ASGI middleware wraps `send` in a coroutine that looks only at the response's start
(Starlette's two error middlewares note that the answer began, the gateway's adds the request
ids), and every event of a stream went through all three: three coroutine calls per event, a few
percent of what relaying an event costs. The gateway's server (gateway/edge/) offers the server's
send itself (`DIRECT_SEND_EXTENSION`), for body messages once the start has gone through the
middleware. The extension is a zero-argument callable that returns that send, or None once the
server's request object is gone: a weak reference, since that object holds the scope, and the
scope holding it back would leave every request to the garbage collector.

What it relies on of Starlette, undocumented, and why it is a seam: that the `send` wrappers of
its two error middlewares (`starlette.middleware.errors.ServerErrorMiddleware` and the
`ExceptionMiddleware`'s handler wrapper) look at `http.response.start` alone, noting that the
answer began, and pass every message through unchanged; so a body message that bypasses them
changes nothing they know. Pinned in pyproject.toml to the minor version
tests/seams/test_starlette.py checked (it sends a stream's start through the middleware, its
body beneath it, then fails the request, and sees no second answer begun).
"""

from __future__ import annotations

from typing import Any

from starlette.types import Scope, Send

DIRECT_SEND_EXTENSION = "sluicegate.direct_send"


def direct_send(scope: Scope, send: Send) -> Send:
    """The server's send for this response's body, where the server offers it; else `send`."""
    extensions: Any = scope.get("extensions")
    offered = extensions.get(DIRECT_SEND_EXTENSION) if isinstance(extensions, dict) else None
    direct = offered() if callable(offered) else None
    return direct if callable(direct) else send
