"""One stream's deadlines, kept by one loop timer that the events do not move.

A stream's relay waits on its two sides in turn: on the worker (its first output by `first_token`,
then each next within `idle`) and on the client (each write taken within the write-stall bound),
and the whole stream must end by `stream_total`. Moving a loop timer for every event, there and
back around each write, cost more than a tenth of the relay's CPU per event (a timer handle
cancelled and one made, twice an event). Here the relay only writes down times, and one timer
reads them: it fires at the earliest moment a deadline could fall due, re-arms itself for the
real deadline when that has moved on, and expires the relay's `asyncio.Timeout` only once a
deadline has passed. A write can start at any moment and must end within `write_s`, so the timer
never sleeps longer than that: a stream costs a timer callback per `write_s` at most, however
many events it relays.
"""

from __future__ import annotations

import asyncio


class StreamDeadlines:
    __slots__ = ("_handle", "_loop", "_stream_deadline", "_timeout", "_write_s", "sending_since", "worker_by")

    def __init__(
        self,
        timeout: asyncio.Timeout,
        *,
        worker_by: float,
        write_s: float,
        stream_deadline: float,
    ) -> None:
        """`timeout`: the relay's, entered with no deadline of its own (`asyncio.timeout(None)`)."""
        # The worker's deadline while nothing is being written (moved on by each output).
        self.worker_by = worker_by
        # When the write under way started; None between writes.
        self.sending_since: float | None = None
        self._write_s = write_s
        self._stream_deadline = stream_deadline
        self._timeout = timeout
        self._loop = asyncio.get_running_loop()
        now = self._loop.time()
        self._handle: asyncio.TimerHandle | None = self._loop.call_at(self._next(now), self._check)

    def due(self) -> float:
        """The deadline that holds now: the write's while one is under way, else the worker's."""
        since = self.sending_since
        due = self.worker_by if since is None else since + self._write_s
        return min(due, self._stream_deadline)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _next(self, now: float) -> float:
        # Never later than a write starting now would fall due.
        return min(self.due(), now + self._write_s)

    def _check(self) -> None:
        now = self._loop.time()
        if now >= self.due():
            self._handle = None
            self._timeout.reschedule(now)  # the wait under way ends in TimeoutError
        else:
            self._handle = self._loop.call_at(self._next(now), self._check)
