"""Handing a saturated pool's freed slots to the requests waiting for them, by token fair share (a
model's `fairness: tokens`): the pool's TokenQueue holds the waiters, its PoolShare the counters.

When one team waits (here), it gets a freed slot at once, charged in the next batch: a single
active team gets the whole pool and never waits for Redis. When several wait, the shared counters
choose, which takes a round trip to Redis, so the choice is made ahead: as soon as several teams
wait, one pick asks Redis which of them goes next (and charges it), and the next freed slot goes
straight to that waiter, after which the following pick starts. A freed slot thus waits for Redis
only when it frees less than a round trip after the previous one; the choice is at most one
request per replica early, which VTC's bound already counts (one request in flight per replica).

A pre-chosen waiter that left meanwhile, or that a newly arrived higher priority band now goes
before, is dropped and its charge given back. Redis down or slow: `pick` returns None and the local
counters choose. One pick at a time per pool, and a pick holds no slot: a slot is never lost or
handed twice, whatever Redis does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from gateway.observability.metrics import Metrics
from gateway.routing.endpoint import Endpoint
from gateway.routing.share import ShareTicket
from gateway.routing.tokenqueue import TokenQueue, Waiter
from gateway.routing.vtc import PoolShare
from gateway.routing.vtc_store import FairShareStore


class TokenDispatch:
    def __init__(
        self,
        pool: str,
        max_queue: int,
        metrics: Metrics,
        store: FairShareStore | None,
        *,
        take_slot: Callable[[], Endpoint | None],
        release: Callable[[Endpoint], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`take_slot()`: a free slot of the pool, taken (its endpoint's in-flight count raised),
        or None; `release(endpoint)`: gives one back (and drains), for an orphaned handover."""
        self._take_slot = take_slot
        self.queue: TokenQueue[Endpoint] = TokenQueue(
            max_queue, on_orphan=release, on_backlog=self._backlog, clock=clock
        )
        self.share = PoolShare(pool, metrics, store, self.queue.teams)
        self._picking: asyncio.Task[None] | None = None
        self._next: Waiter[Endpoint] | None = None  # chosen (and charged) by Redis, not yet served
        self._local_once = False  # the last pick got no answer: the next choice is local

    def dispatched(self, ticket: ShareTicket) -> None:
        """A request took a slot without waiting: charged in the next batch, unless nobody waits
        in the pool (PoolShare.contended)."""
        if self.share.contended():
            self.share.charge(ticket.team, ticket.charged(self.share))

    def drain(self) -> None:
        queue = self.queue
        while queue:
            heads = queue.candidates()
            if not heads:
                return
            chosen = self._chosen(heads[0].ticket.band)
            if chosen is None and len(heads) > 1 and not self._local_once and self.share.remote():
                self._pick_ahead(heads)
                return
            slot = self._take_slot()
            if slot is None:
                return
            if chosen is not None:
                self._next = None
                queue.offer(slot, chosen, self._choose)
                chosen.ticket.charged(self.share)  # Redis charged it with the pick
                self.share.picked(chosen.ticket.team)
            else:
                self._local_once = False
                served = queue.offer(slot, heads[0] if len(heads) == 1 else None, self._choose)
                if served is None:
                    slot.inflight -= 1
                    return
                self.dispatched(served.ticket)
        self._chosen(0)  # nobody waits: a choice made for a waiter that left is given back

    def chosen_ahead(self) -> bool:
        """Whether Redis has already chosen who gets the next freed slot."""
        return self._next is not None

    def _chosen(self, top_band: int) -> Waiter[Endpoint] | None:
        """The waiter Redis chose, if it still waits and no higher band came since."""
        chosen = self._next
        if chosen is None:
            return None
        if chosen.live and not chosen.future.done() and chosen.ticket.band >= top_band:
            return chosen
        self._next = None
        self.share.refund(chosen.ticket.team, chosen.ticket.estimate)
        return None

    def _pick_ahead(self, heads: list[Waiter[Endpoint]]) -> None:
        if self._picking is None:
            self._picking = asyncio.get_running_loop().create_task(self._pick(heads))

    async def _pick(self, heads: list[Waiter[Endpoint]]) -> None:
        try:
            index = await self.share.pick([_candidate(w) for w in heads])
        finally:
            self._picking = None
        if index is None:
            self._local_once = True
        else:
            self._next = heads[index]
        self.drain()

    def _choose(self, heads: Sequence[Waiter[Endpoint]]) -> int:
        return self.share.local_pick([_candidate(w) for w in heads])

    def _backlog(self, team: str, waiting: int) -> None:
        self._chosen(0)  # a choice made for a waiter that left: given back now, not at a drain
        before = self.share.backlog_changed(team, waiting)
        if waiting and not before and self._next is None and self._picking is None:
            # A second team began waiting: choose between them before a slot frees.
            heads = self.queue.candidates()
            if len(heads) > 1 and self.share.remote(count=False):
                self._pick_ahead(heads)

    def attach(self, store: FairShareStore | None) -> list[asyncio.Task[None]]:
        """See Pool.attach."""
        cancelled = [task for task in (self.share.attach(store),) if task is not None]
        if store is None and self._picking is not None:
            self._picking.cancel()  # holds no slot: nothing to give back
            cancelled.append(self._picking)
            # But a slot freed meanwhile waits for that pick: hand it out (locally, now).
            asyncio.get_running_loop().call_soon(self.drain)
        return cancelled

    def close(self) -> None:
        self.share.close()
        if self._picking is not None:
            self._picking.cancel()


def _candidate(waiter: Waiter[Endpoint]) -> tuple[str, int, float]:
    ticket = waiter.ticket
    return ticket.team, ticket.band, ticket.estimate
