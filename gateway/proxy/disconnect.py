"""Noticing a client that hangs up, so the worker stops generating for nobody.

After the request body has been read, the ASGI `receive` channel has nothing left to say but
`http.disconnect`; waiting on it costs no polling.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from starlette.types import Receive

T = TypeVar("T")


async def client_gone(receive: Receive) -> None:
    """Returns when the client has disconnected."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_client_leaves(work: Awaitable[T], receive: Receive) -> tuple[bool, T | None]:
    """Runs `work` in this task; if the client leaves first, cancels it (closing any worker
    connection it holds) and returns (False, None). Otherwise (True, its result).

    One watcher task and no `asyncio.wait`: this sits on every request's path."""
    current = asyncio.current_task()
    assert current is not None
    left = False

    async def watch() -> None:
        nonlocal left
        await client_gone(receive)
        left = True
        current.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        return True, await work
    except asyncio.CancelledError:
        if not left:
            raise  # someone else's cancellation (shutdown): not ours to swallow
        current.uncancel()
        return False, None
    finally:
        watcher.cancel()
