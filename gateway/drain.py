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

The server side (signals, sockets, waiting) is gateway.edge.draining.DrainingServer; the request
side (the pipeline, the stream relay, and the middleware for every other route) asks `absorbed()`
when a cancellation reaches it, to tell the drain's cut from anything else.
"""

from __future__ import annotations

import asyncio

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

    def absorbed(self) -> bool:
        """Called where a CancelledError was caught: whether it is the cut's, now ended (the task
        goes on and finishes normally, so the server logs no traceback). Any other cancellation
        the caller re-raises."""
        if not self.cutting:
            return False
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        return True
