"""Noticing a client that hangs up, so the worker stops generating for nobody.

After the request body has been read, the ASGI `receive` channel has nothing left to say but
`http.disconnect`; waiting on it costs no polling. A watch cancels the request's own task wherever
it waits (a pool's queue, the worker's answer, a stream's next event): the work runs inline in the
request's task, with no second task to hand it to. The gateway's own server (gateway/edge/) tells
a watch of a lost connection itself (`GONE_EXTENSION`), so no task waits on `receive` for it;
under another server, one watcher task per watched stretch does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from starlette.types import Receive, Scope

# The ASGI scope extension (gateway/edge/) that aborts the client's connection at once: a server
# without it leaves the gateway only able to stop writing.
ABORT_EXTENSION = "sluicegate.abort"
# The ASGI scope extension (gateway/edge/) saying whether `n` more bytes can be written to the
# client without its send waiting (under the transport's high-water mark, writing not paused).
WRITE_ROOM_EXTENSION = "sluicegate.write_room"
# The ASGI scope extension (gateway/edge/) holding the connection's `GoneHooks`.
GONE_EXTENSION = "sluicegate.gone"


class GoneHooks:
    """What a connection calls once it is lost: the server's half of `GONE_EXTENSION`, one per
    connection. A hook is a zero-argument callable; `add` refuses one once the connection is gone."""

    __slots__ = ("_hooks", "lost")

    def __init__(self) -> None:
        self._hooks: set[Callable[[], None]] = set()
        self.lost = False

    def add(self, hook: Callable[[], None]) -> bool:
        if self.lost:
            return False
        self._hooks.add(hook)
        return True

    def discard(self, hook: Callable[[], None]) -> None:
        self._hooks.discard(hook)

    def fire(self) -> None:
        """The connection is lost (the server's connection_lost)."""
        self.lost = True
        hooks, self._hooks = self._hooks, set()
        for hook in hooks:
            hook()


async def client_gone(receive: Receive) -> None:
    """Returns when the client has disconnected."""
    while (await receive())["type"] != "http.disconnect":
        pass


def write_room(scope: Scope) -> Callable[[int], bool] | None:
    """Whether a write of so many bytes cannot make this client's send wait, when the server says."""
    extensions: Any = scope.get("extensions")
    room = extensions.get(WRITE_ROOM_EXTENSION) if isinstance(extensions, dict) else None
    return room if callable(room) else None


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

    __slots__ = ("_absorbed", "_armed", "_hook", "_hooks", "_task", "_watcher", "left")

    def __init__(self, receive: Receive, scope: Scope | None = None) -> None:
        """`scope`: where the server may offer `GONE_EXTENSION` (else a task watches `receive`)."""
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._armed = True
        self._absorbed = False
        self.left = False
        self._hook = self._gone
        self._watcher: asyncio.Future[None] | None = None
        self._hooks = _gone_hooks(scope)
        if self._hooks is None or not self._hooks.add(self._hook):
            # Another server, or a connection already lost: `receive` says so at once.
            self._hooks = None
            self._watcher = asyncio.ensure_future(self._watch(receive))

    def _gone(self) -> None:
        if self._armed:
            self.left = True
            self._task.cancel()

    async def _watch(self, receive: Receive) -> None:
        await client_gone(receive)
        self._gone()

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
        if self._hooks is not None:
            self._hooks.discard(self._hook)
        if self._watcher is not None:
            self._watcher.cancel()
        if self.left and not self._absorbed:
            # The client left just as the work finished: the cancellation is still pending on
            # this task, and would hit whatever it awaits next. Take it here.
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                self._absorbed = True
                self._task.uncancel()


def _gone_hooks(scope: Scope | None) -> GoneHooks | None:
    extensions: Any = None if scope is None else scope.get("extensions")
    hooks = extensions.get(GONE_EXTENSION) if isinstance(extensions, dict) else None
    return hooks if isinstance(hooks, GoneHooks) else None
