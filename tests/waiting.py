"""Polling with a deadline: how tests wait for something another process or loop will do,
without fixed sleeps."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_until(check: Callable[[], object], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s}s: {what}")
        time.sleep(0.02)


async def eventually(check: Callable[[], object], what: str, within: float = 5.0) -> None:
    """The same, on a running event loop, which keeps serving while it waits."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for: {what}")
        await asyncio.sleep(0.01)
