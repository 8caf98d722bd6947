"""uvicorn's server, stopped the way a Kubernetes rollout needs (gateway.drain says the sequence).

uvicorn alone, on SIGTERM, stops listening at once (requests still routed to the pod during
endpoint propagation are refused), gives open requests a fixed time, then cancels them with a
traceback each, and finally raises the signal again so the process dies by it. Here:
  - the first SIGTERM or SIGINT only marks the drain (/readyz 503) and the server keeps serving for
    `shutdown_delay_s`;
  - then it stops accepting, closes idle keep-alive connections and waits for the open requests
    for up to `drain_timeout_s`;
  - then it cuts what is left (each request ends in its API's shape: gateway.drain), runs the
    lifespan's shutdown (metering flushed) and returns: the process exits 0;
  - a second signal skips what is left of the delay and of the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
import time
from collections.abc import Iterator
from types import FrameType

import uvicorn

from gateway.drain import Drain
from gateway.seams.uvicorn import open_connections, request_tasks

log = logging.getLogger("sluicegate.shutdown")

# uvicorn's set of request tasks changes under us and a second signal can only set a flag, so the
# waits below poll (as uvicorn's own shutdown does) rather than await one event.
_POLL_S = 0.05
# After the cut, how long the cancelled requests get to write their last event and settle.
_CUT_GRACE_S = 5.0


class DrainingServer(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, drain: Drain, *, shutdown_delay_s: float, drain_timeout_s: float
    ) -> None:
        super().__init__(config)
        self.drain = drain
        self._shutdown_delay_s = shutdown_delay_s
        self._drain_timeout_s = drain_timeout_s
        self._stop_listening_at: float | None = None  # monotonic

    # -- signals ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's, without raising the signal again at the end: the drain is the whole answer
        to it, and a completed drain is a clean exit."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # A signal handler: it only sets flags, which the event loop reads on its next tick.
        if self._stop_listening_at is None:
            self.drain.begin()
            self._stop_listening_at = time.monotonic() + self._shutdown_delay_s
        else:
            self.drain.hurry()

    async def on_tick(self, counter: int) -> bool:
        if await super().on_tick(counter):
            return True
        at = self._stop_listening_at
        if at is not None and (time.monotonic() >= at or self.drain.hurried):
            log.info("shutdown: the delay is over; no new connections, draining open requests")
            return True
        return False

    # -- shutdown -----------------------------------------------------------------------------

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.drain.begin()  # also when uvicorn stops for a reason of its own
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        # Idle keep-alive connections close now; busy ones once their answer is complete.
        for connection in open_connections(self):
            connection.shutdown()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._drain_timeout_s
        while request_tasks(self) and not self.drain.hurried and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(_POLL_S)
        if request_tasks(self):
            log.warning("shutdown: drain time is up; ending %d open request(s)", len(request_tasks(self)))
            self.drain.cut()
            for task in list(request_tasks(self)):
                task.cancel()
            cut_deadline = loop.time() + _CUT_GRACE_S
            while request_tasks(self) and loop.time() < cut_deadline:  # noqa: ASYNC110
                await asyncio.sleep(_POLL_S)
        # What is left are connections with nothing in flight (their answers went out).
        for connection in open_connections(self):
            connection.shutdown()
        await self.lifespan.shutdown()
        log.info("shutdown: complete")
