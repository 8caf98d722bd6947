"""The queue in front of a saturated pool when its fairness is by tokens (`fairness: tokens`).

Waiters are kept per (priority band, team), earliest deadline first within each (those without one
after those with one, first come first served among equals: gateway/routing/deadline.py). The queue
does not decide which team goes next: `candidates()` gives the head waiter of each team in the
highest band that has waiters, the
pool asks the fair share counters (gateway.routing.vtc) which of them to serve, and `offer(item,
waiter)` hands the item to that waiter, or to `choose(candidates)` when it left meanwhile.

Handover contract (as in gateway.routing.fairqueue): `offer()` resolves the chosen waiter's future
synchronously and takes it off the queue; a waiter cancelled or timed out after that passes the
item to `on_orphan(item)`, so an offered item ends up exactly once either returned by `wait()` or
given to `on_orphan`. Places are shared across teams when full, as in fairqueue.py (`crowding_team`).
Not thread-safe: call everything from the event loop thread.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from gateway.routing.fairqueue import DeadlineUnreachable, QueueFull, QueueTimeout, crowding_team
from gateway.routing.share import ShareTicket

T = TypeVar("T")


class Waiter(Generic[T]):
    __slots__ = ("enqueued_at", "future", "live", "seq", "ticket")

    def __init__(self, ticket: ShareTicket, seq: int, enqueued_at: float, future: asyncio.Future[T]) -> None:
        self.ticket = ticket
        self.seq = seq
        self.enqueued_at = enqueued_at
        self.future = future
        self.live = True


# A team's waiters in order: (deadline or inf, arrival number, waiter).
Entry = tuple[float, int, Waiter[T]]


class TokenQueue(Generic[T]):
    def __init__(
        self,
        max_size: int,
        *,
        on_orphan: Callable[[T], None],
        on_backlog: Callable[[str, int], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`on_backlog(team, waiting)`: the team's number of waiters changed (0: none left)."""
        if max_size < 0:
            raise ValueError(f"max_size must be >= 0, got {max_size}")
        self._max_size = max_size
        self._on_orphan = on_orphan
        self._on_backlog = on_backlog
        self._clock = clock
        self._seq = itertools.count()
        # band -> team -> heap of Entry; waiters that left stay until they reach the front (lazy
        # removal).
        self._bands: dict[int, dict[str, list[Entry[T]]]] = {}
        self._live_in_band: dict[int, int] = {}
        self._live_in_team: dict[tuple[int, str], int] = {}
        self._weights: dict[str, int] = {}  # each waiting team's weight, for `ahead`
        self._count: dict[str, int] = {}
        self._live = 0
        self.with_deadline = 0  # live waiters with a deadline

    def __len__(self) -> int:
        return self._live

    def waiting_by_team(self) -> dict[str, int]:
        return dict(self._count)

    def teams(self) -> list[str]:
        return list(self._count)

    def oldest_wait(self) -> float:
        """Seconds (by `clock`) the longest-waiting waiter has waited; 0 when empty. O(n)."""
        stamps = [
            w.enqueued_at for teams in self._bands.values() for q in teams.values() for _, _, w in q if w.live
        ]
        return self._clock() - min(stamps) if stamps else 0.0

    # The pool hands over its max_queue_wait per call, so a timeout argument is the interface.
    async def wait(self, ticket: ShareTicket, timeout: float) -> T:  # noqa: ASYNC109
        """Wait for an item from `offer()`. Raises QueueFull at once when full, QueueTimeout
        after `timeout` seconds; cancellation takes the waiter off the queue."""
        if self._live >= self._max_size:
            self._make_room(ticket.team)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        waiter = Waiter(ticket, next(self._seq), self._clock(), future)
        deadline = ticket.deadline
        entry = (math.inf if deadline is None else deadline, waiter.seq, waiter)
        heapq.heappush(self._bands.setdefault(ticket.band, {}).setdefault(ticket.team, []), entry)
        self._live_in_band[ticket.band] = self._live_in_band.get(ticket.band, 0) + 1
        place = (ticket.band, ticket.team)
        self._live_in_team[place] = self._live_in_team.get(place, 0) + 1
        self._weights[ticket.team] = ticket.weight
        self.with_deadline += deadline is not None
        self._live += 1
        count = self._count[ticket.team] = self._count.get(ticket.team, 0) + 1
        self._on_backlog(ticket.team, count)
        try:
            async with asyncio.timeout(timeout):
                return await future
        except BaseException as exc:
            if future.done() and not future.cancelled() and future.exception() is None:
                self._on_orphan(future.result())  # offer() handed it over: ours to give back
            elif waiter.live:
                self._remove(waiter)
            if isinstance(exc, TimeoutError):
                raise QueueTimeout(f"not served within {timeout:g}s") from None
            raise

    def candidates(self) -> list[Waiter[T]]:
        """The head waiter of each team in the highest band with waiters, oldest first."""
        while self._live:
            top = max(self._live_in_band)
            heads: list[Waiter[T]] = []
            stale = None
            teams = self._bands[top]
            for team in [team for team, heap in teams.items() if not _prune(heap)]:
                del teams[team]  # a team with nobody left: the band keeps no entry for it
            for heap in teams.values():
                head = heap[0][2]
                if head.future.done():
                    stale = head  # cancelled, but its task has not run its cleanup yet
                    break
                heads.append(head)
            if stale is None:
                heads.sort(key=lambda w: w.seq)
                return heads
            self._remove(stale)
        return []

    def offer(
        self, item: T, waiter: Waiter[T] | None, choose: Callable[[Sequence[Waiter[T]]], int]
    ) -> Waiter[T] | None:
        """Hand `item` to `waiter` if it still waits, else to `choose(candidates())`'s pick.
        Returns the waiter served, or None (the caller keeps the item) if nobody waits."""
        if waiter is None or not waiter.live or waiter.future.done():
            heads = self.candidates()
            if not heads:
                return None
            waiter = heads[choose(heads)]
        teams = self._bands[waiter.ticket.band]
        heap = teams[waiter.ticket.team]
        if heap and heap[0][2] is waiter:
            heapq.heappop(heap)
            if not _prune(heap):
                del teams[waiter.ticket.team]
        self._remove(waiter)
        waiter.future.set_result(item)
        return waiter

    # -- deadlines ----------------------------------------------------------------------------

    def ahead(self, ticket: ShareTicket) -> int:
        """How many waiters a request of `ticket` that arrives now would wait behind."""
        heap = self._bands.get(ticket.band, {}).get(ticket.team, ())
        if ticket.deadline is None:
            own = self._live_in_team.get((ticket.band, ticket.team), 0)
        else:
            own = sum(1 for key, _, w in heap if w.live and key <= ticket.deadline)
        return self._ahead(ticket, own)

    def _ahead(self, ticket: ShareTicket, own: int) -> int:
        """Waiters served before one with `own` of its team's ahead: every waiter of a higher
        band, and of each other team in its band as many as fair share serves while its own
        team's `own + 1` go (by weight; an estimate: the counters are not consulted)."""
        band = ticket.band
        total = own + sum(n for b, n in self._live_in_band.items() if b > band)
        mine = own + 1
        for team in self._bands.get(band, ()):
            if team != ticket.team:
                share = math.ceil(mine * self._weights.get(team, 1) / max(ticket.weight, 1))
                total += min(self._live_in_team.get((band, team), 0), share)
        return total

    def late(
        self, now: float, estimate: Callable[[int], float | None]
    ) -> list[tuple[Waiter[T], float | None]]:
        """The waiters that can no longer be served before their deadline, with the wait each
        is estimated at (None: its deadline passed). O(waiters), for DeadlineWatch."""
        found: list[tuple[Waiter[T], float | None]] = []
        for teams in self._bands.values():
            for heap in teams.values():
                # (deadline, seq) is unique: sorting never compares the waiters themselves.
                order = sorted(e for e in heap if e[2].live and not e[2].future.done())
                for own, (deadline, _, waiter) in enumerate(order):
                    if deadline == math.inf:
                        break
                    if now >= deadline:
                        found.append((waiter, None))
                        continue
                    wait = estimate(self._ahead(waiter.ticket, own))
                    if wait is not None and now + wait > deadline:
                        found.append((waiter, wait))
        return found

    def refuse(self, waiter: Waiter[T], wait: float | None) -> None:
        """Takes `waiter` off the queue: its `wait()` raises DeadlineUnreachable."""
        if waiter.live:
            self._remove(waiter)
            if not waiter.future.done():
                waiter.future.set_exception(DeadlineUnreachable(wait))

    def _make_room(self, team: str) -> None:
        """Full: the newest waiter of the team holding the most gives its place to `team` if
        `team` holds less than its share; otherwise `team` is refused. O(n), on the full path only."""
        crowding = crowding_team(self._count, team, self._max_size)
        if crowding is None:
            raise QueueFull(f"{self._live} requests already waiting")
        newest = max(
            (e[2] for teams in self._bands.values() for e in teams.get(crowding, ()) if e[2].live),
            key=lambda w: w.seq,
        )
        self._remove(newest)  # left in its heap, pruned when it reaches the front
        if not newest.future.done():  # done: cancelled, and leaving anyway
            newest.future.set_exception(QueueFull("its place went to another team's request"))

    def _remove(self, waiter: Waiter[T]) -> None:
        waiter.live = False
        ticket = waiter.ticket
        self._live -= 1
        self.with_deadline -= ticket.deadline is not None
        place = (ticket.band, ticket.team)
        if self._live_in_team[place] > 1:
            self._live_in_team[place] -= 1
        else:
            del self._live_in_team[place]
        self._live_in_band[ticket.band] -= 1
        if not self._live_in_band[ticket.band]:
            del self._live_in_band[ticket.band]
            del self._bands[ticket.band]
        left = self._count[ticket.team] - 1
        if left:
            self._count[ticket.team] = left
        else:
            del self._count[ticket.team]
            del self._weights[ticket.team]
        self._on_backlog(ticket.team, left)


def _prune(heap: list[Entry[T]]) -> bool:
    """Drops the waiters that left from the front of `heap`; whether any is left."""
    while heap and not heap[0][2].live:
        heapq.heappop(heap)
    return bool(heap)
