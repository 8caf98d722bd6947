"""The gateway's shutdown, as every part of it sees it: one `Drain` per app, built in create_app.

    SIGTERM ──> begin()   /readyz answers 503; everything is still served (SLUICEGATE_SHUTDOWN_DELAY),
                          so Kubernetes takes the pod out of its Service before it stops listening
            ──> (the server stops accepting; open requests and streams finish, for up to
                 SLUICEGATE_DRAIN_TIMEOUT)
            ──> cut()     every request still in flight is cancelled: a stream ends with its API's
                          error event (and `[DONE]` on OpenAI's), settled with what was relayed; a
                          request not yet answered gets 503 `shutting_down`. Then metering is
                          flushed and the process exits 0.
    a 2nd signal ──> hurry()   the rest of the delay and of the drain is skipped: cut() at once.

The server side (signals, sockets, waiting) is gateway.edge.server.DrainingServer; the request
side reads `cutting` when a cancellation reaches it, to tell the drain's cut from anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import ErrorCode, GatewayError

SHUTTING_DOWN_MESSAGE = "The gateway is shutting down; retry the request."


class Drain:
    """Plain flags: set from a signal handler, read on the event loop."""

    __slots__ = ("cutting", "draining", "hurried")

    def __init__(self) -> None:
        self.draining = False
        self.hurried = False
        self.cutting = False

    def begin(self) -> None:
        self.draining = True

    def hurry(self) -> None:
        self.draining = self.hurried = True

    def cut(self) -> None:
        self.cutting = True

    def error(self) -> GatewayError:
        return GatewayError(ErrorCode.SHUTTING_DOWN, SHUTTING_DOWN_MESSAGE, headers={"retry-after": "1"})

    @contextlib.contextmanager
    def absorbing_cut(self) -> Iterator[None]:
        """Ends the cancellation the cut delivers here, so the task finishes normally (no
        traceback from the server); any other cancellation goes on."""
        try:
            yield
        except asyncio.CancelledError:
            if not self.cutting:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()


class DrainMiddleware:
    """A request the cut reaches before its answer began gets 503 `shutting_down` (in the OpenAI
    envelope: a dialect that began an answer ends it itself, in its own shape)."""

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watching_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        with self.drain.absorbing_cut():
            await self.app(scope, receive, watching_send)
            return
        if not started:
            await self.drain.error().response()(scope, receive, send)
