"""Noticing a client that hangs up, so the worker stops generating for nobody.

After the request body has been read, the ASGI `receive` channel has nothing left to say but
`http.disconnect`; waiting on it costs no polling.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from starlette.types import Receive

T = TypeVar("T")


async def client_gone(receive: Receive) -> None:
    """Returns when the client has disconnected."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_client_leaves(work: Awaitable[T], receive: Receive) -> tuple[bool, T | None]:
    """Runs `work`; if the client leaves first, cancels it (closing any worker connection it
    holds) and returns (False, None). Otherwise (True, its result)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(client_gone(receive))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        return False, None
    return True, task.result()
