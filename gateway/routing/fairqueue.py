"""Weighted fair queue by request count for requests waiting on a saturated endpoint pool, per
replica: a model's `fairness: requests` (the default, `tokens`, is tokenqueue.py and vtc.py).

Order across teams is virtual-time fair queuing: a waiter of team t with weight w gets
``start = max(virtual_time, last_tag[t])`` and ``finish = start + 1/w``; ``offer()`` serves the
smallest finish tag (ties: arrival order) and moves virtual time up to the served waiter's start.
Within a team tags only grow, so a team is FIFO. The ``max`` with virtual time means a team that
was idle gets no credit for the past, so a team sending 10x more cannot delay another team's
waiter by more than about one service slot.

Handover contract (the part the caller must get right): ``offer()`` resolves the chosen waiter's
future synchronously and takes it off the queue, so the item belongs to that waiter from then on.
If the waiting task is cancelled or times out after that but before it resumes, ``wait()`` cannot
return the item, so it passes it to ``on_orphan(item)`` and then re-raises. An offered item thus
ends up exactly once either returned by ``wait()`` or given to ``on_orphan``; never both, never
neither. ``on_orphan`` must not raise. Not thread-safe: call everything from the event loop thread.

Places are shared too (``make_room``): when the queue is full, a team holding fewer than its share
(``max_size`` over the teams waiting, its own included) takes the place of the newest waiter of the
team that holds the most, which gets QueueFull; otherwise one team could fill the queue and every
other team would be refused at once. Both queues (this one and tokenqueue.py) do so.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

# Lazily deleted heap entries are compacted once they outnumber the live ones by this much, which
# keeps memory bounded by the number of waiters while keeping every operation O(log n) amortised.
_SLACK = 64


class QueueFull(Exception):
    """The queue already holds ``max_size`` waiters."""


class QueueTimeout(Exception):
    """The waiter was not served within its timeout."""


class DeadlineUnreachable(Exception):
    """The waiter can no longer be served before its deadline (gateway/routing/deadline.py)."""

    def __init__(self, estimate_s: float | None) -> None:
        super().__init__("its deadline cannot be met")
        self.estimate_s = estimate_s  # the wait it was refused for; None: the deadline passed


def crowding_team(waiting: dict[str, int], team: str, max_size: int) -> str | None:
    """The queue is full and `team` wants a place: the team that must give one up (the one
    holding the most), or None when `team` already holds its share and is refused instead."""
    teams = len(waiting) + (team not in waiting)
    if waiting.get(team, 0) >= max_size // teams:
        return None
    # Someone holds more than its share, since the places add up to max_size.
    return max(waiting, key=lambda t: waiting[t])


class _Waiter(Generic[T]):
    __slots__ = ("enqueued_at", "finish", "future", "live", "start", "team")

    def __init__(self, team: str, start: float, finish: float, enqueued_at: float, future: asyncio.Future[T]):
        self.team = team
        self.start = start
        self.finish = finish
        self.enqueued_at = enqueued_at
        self.future = future
        # Heap entries are not removed when a waiter leaves; this flag marks them as dead.
        self.live = True


class FairQueue(Generic[T]):
    # Deadlines are not re-checked here (no estimate of a waiter's place): each deadline's own
    # timer ends its wait (gateway/routing/pool.py).
    with_deadline = 0

    def __init__(
        self,
        max_size: int,
        *,
        on_orphan: Callable[[T], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_size < 0:
            raise ValueError(f"max_size must be >= 0, got {max_size}")
        self._max_size = max_size
        self._on_orphan = on_orphan
        self._clock = clock
        self._heap: list[tuple[float, int, _Waiter[T]]] = []
        self._seq = itertools.count()
        self._live = 0
        self._count: dict[str, int] = {}
        self._last: dict[str, float] = {}
        # Teams without waiters whose last tag is still ahead of virtual time; they can be forgotten
        # once virtual time catches up, because the max() in the tag would then ignore the entry.
        self._idle: list[tuple[float, str]] = []
        self._vtime = 0.0

    def __len__(self) -> int:
        return self._live

    def waiting_by_team(self) -> dict[str, int]:
        return dict(self._count)

    def oldest_wait(self) -> float:
        """Seconds (by ``clock``) the longest-waiting waiter has waited; 0 when empty. O(n)."""
        stamps = [w.enqueued_at for _, _, w in self._heap if w.live]
        return self._clock() - min(stamps) if stamps else 0.0

    # The router hands over the pool's max_queue_wait per call, so a timeout argument is the interface.
    async def wait(self, team: str, weight: float, timeout: float) -> T:  # noqa: ASYNC109
        """Wait for an item from ``offer()``, served in weighted fair order.

        Raises QueueFull at once when full, QueueTimeout after ``timeout`` seconds (event loop
        clock); cancellation takes the waiter off the queue. See the module doc for orphans.
        """
        if not (weight > 0 and math.isfinite(weight)):
            raise ValueError(f"weight must be a positive finite number, got {weight}")
        if self._live >= self._max_size:
            self._make_room(team)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        waiter = self._enqueue(team, weight, future)
        try:
            async with asyncio.timeout(timeout):
                return await future
        except BaseException as exc:
            if future.done() and not future.cancelled() and future.exception() is None:
                # offer() already handed the item over, so it is ours to give back.
                self._on_orphan(future.result())
            elif waiter.live:
                self._remove(waiter, served=False)
            if isinstance(exc, TimeoutError):
                raise QueueTimeout(f"not served within {timeout:g}s") from None
            raise

    def offer(self, item: T) -> bool:
        """Hand ``item`` to the next waiter; False (caller keeps the item) if nobody waits."""
        while self._heap:
            _, _, waiter = heapq.heappop(self._heap)
            if not waiter.live:
                continue
            if waiter.future.done():
                # Cancelled (client left or timed out) but its task has not run its cleanup yet.
                self._remove(waiter, served=False)
                continue
            self._remove(waiter, served=True)
            waiter.future.set_result(item)
            return True
        return False

    def _make_room(self, team: str) -> None:
        """Full: the newest waiter of the team holding the most gives its place to `team` if
        `team` holds less than its share; otherwise `team` is refused. O(n), on the full path only."""
        crowding = crowding_team(self._count, team, self._max_size)
        if crowding is None:
            raise QueueFull(f"{self._live} requests already waiting")
        newest = max(
            (entry for entry in self._heap if entry[2].live and entry[2].team == crowding),
            key=lambda entry: entry[1],
        )[2]
        self._remove(newest, served=False)
        if not newest.future.done():  # done: cancelled, and leaving anyway
            newest.future.set_exception(QueueFull("its place went to another team's request"))

    def _enqueue(self, team: str, weight: float, future: asyncio.Future[T]) -> _Waiter[T]:
        start = max(self._vtime, self._last.get(team, self._vtime))
        finish = start + 1.0 / weight
        self._last[team] = finish
        self._count[team] = self._count.get(team, 0) + 1
        self._live += 1
        waiter = _Waiter(team, start, finish, self._clock(), future)
        heapq.heappush(self._heap, (finish, next(self._seq), waiter))
        return waiter

    def _remove(self, waiter: _Waiter[T], *, served: bool) -> None:
        waiter.live = False
        self._live -= 1
        team = waiter.team
        if served:
            self._vtime = max(self._vtime, waiter.start)
        elif self._last[team] == waiter.finish:
            # The team's newest waiter gave up: give its virtual slot back so that clients that
            # disconnect do not push their team's later requests back. (A middle waiter's slot
            # stays charged; re-tagging the ones behind it would cost O(n).)
            self._last[team] = waiter.start
        left = self._count[team] - 1
        if left:
            self._count[team] = left
        else:
            del self._count[team]
            if self._last[team] <= self._vtime:
                del self._last[team]
            else:
                heapq.heappush(self._idle, (self._last[team], team))
        if self._live == 0:
            # End of a busy period: nobody waits, so no tag can matter any more.
            self._heap.clear()
            self._idle.clear()
            self._last.clear()
            self._vtime = 0.0
            return
        while self._idle and self._idle[0][0] <= self._vtime:
            _, idle_team = heapq.heappop(self._idle)
            if idle_team not in self._count and self._last.get(idle_team, math.inf) <= self._vtime:
                del self._last[idle_team]
        if len(self._heap) > 2 * self._live + _SLACK:
            self._heap = [entry for entry in self._heap if entry[2].live]
            heapq.heapify(self._heap)
        if len(self._idle) > 2 * len(self._last) + _SLACK:
            self._idle = [(tag, t) for t, tag in self._last.items() if t not in self._count]
            heapq.heapify(self._idle)
