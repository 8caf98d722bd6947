"""Noticing a client that hangs up, so the worker stops generating for nobody.

After the request body has been read, the ASGI `receive` channel has nothing left to say but
`http.disconnect`; waiting on it costs no polling. One watcher task per watched stretch cancels the
request's own task wherever it waits (a pool's queue, the worker's answer, a stream's next
event): the work runs inline in the request's task, with no second task to hand it to.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from starlette.types import Receive, Scope

# The ASGI scope extension (gateway/edge/) that aborts the client's connection at once: a server
# without it leaves the gateway only able to stop writing.
ABORT_EXTENSION = "sluicegate.abort"


async def client_gone(receive: Receive) -> None:
    """Returns when the client has disconnected."""
    while (await receive())["type"] != "http.disconnect":
        pass


def client_abort(scope: Scope) -> Callable[[], None] | None:
    """What cuts this client's connection, when the server offers it."""
    extensions: Any = scope.get("extensions")
    abort = extensions.get(ABORT_EXTENSION) if isinstance(extensions, dict) else None
    return abort if callable(abort) else None


class ClientWatch:
    """Cancels the task that made it when the client hangs up, until `delivered()` or `close()`.

    watch = ClientWatch(receive)
    try:
        ...  # awaits that a departing client should cut short
    except asyncio.CancelledError:
        if not watch.caught():
            raise  # someone else's cancellation (shutdown): not ours to swallow
        ...  # the client left
    finally:
        await watch.close()
    """

    __slots__ = ("_absorbed", "_armed", "_task", "_watcher", "left")

    def __init__(self, receive: Receive) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._armed = True
        self._absorbed = False
        self.left = False
        self._watcher = asyncio.ensure_future(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        await client_gone(receive)
        if self._armed:
            self.left = True
            self._task.cancel()

    def delivered(self) -> None:
        """The answer's end is on its way: a client that hangs up now has not left early."""
        self._armed = False

    def caught(self) -> bool:
        """Inside `except CancelledError`: whether it was this watch's, which is then absorbed."""
        if not self.left or self._absorbed:
            return False
        self._absorbed = True
        self._task.uncancel()
        return True

    async def close(self) -> None:
        self._armed = False
        self._watcher.cancel()
        if self.left and not self._absorbed:
            # The client left just as the work finished: the cancellation is still pending on
            # this task, and would hit whatever it awaits next. Take it here.
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                self._absorbed = True
                self._task.uncancel()
