"""ASGI plumbing for answers that take time: a response that owns the raw ASGI channel, and work
that runs only while its client stays."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send


async def _until_disconnect(receive: Receive) -> None:
    # The request body has already been read, so the next message the server delivers is the
    # disconnect (uvicorn also sends one after the response completes).
    while (await receive())["type"] != "http.disconnect":
        pass


async def run_unless_disconnected(work: Coroutine[Any, Any, None], receive: Receive) -> bool:
    """Run `work` while watching for the client leaving; cancel it at once if it does.

    Returns True when `work` finished, False when the client disconnected first. Exceptions from
    `work` propagate.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_until_disconnect(receive))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, watcher):
            if not pending.done():
                pending.cancel()
        await asyncio.gather(task, watcher, return_exceptions=True)
    # A finished generation wins over the disconnect the server reports once it is complete.
    if task.done() and not task.cancelled():
        task.result()
        return True
    return False


class ASGIResponse(Response):
    """A Starlette response that hands the raw ASGI triple to `serve`.

    Streaming needs `receive` (to see the client leave) and control over when the body ends (to
    leave it unfinished), which Starlette's StreamingResponse keeps to itself.
    """

    def __init__(self, serve: Callable[[Receive, Send], Awaitable[None]]) -> None:
        self.status_code = 200
        self.background = None
        self.init_headers()
        self._serve = serve

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._serve(receive, send)
