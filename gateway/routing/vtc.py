"""Token fair share counters for each pool, kept in Redis so every replica decides on the same
numbers (the algorithm and the keys' lifetimes are in gateway/redis/lua/vtc.lua).

A `PoolShare` is one pool's view. It keeps a local copy of the counters (replaced by every reply
from Redis, moved by this replica's own charges in between) and queues this replica's updates
(charges at dispatch, corrections at settlement, heartbeats for the teams waiting here or with
requests in flight here), which a background task sends in batches: one script call carries
whatever piled up while the previous one was in flight. Only a choice between several waiting
teams asks Redis (`pick`, made ahead of the slot it is for: gateway/routing/dispatch.py), and that
call carries the pending updates too (through gateway/routing/vtc_store.py).

When Redis is unreachable, slow (past the timeout) or the app's breaker is open, `pick` returns
None and the pool chooses by the local copy, a per-replica token fair queue; updates that could not
be sent are dropped (the local copy has them; a dropped charge is never refunded to Redis later,
which would be credit for nothing). Both are counted in
`sluicegate_fair_share_fallbacks_total`. Nothing here can stall a pool: a failed pick is a local
pick. Without a store (no Redis: unit tests, tools) the local copy is all there is.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from gateway.errors import StoreUnavailable
from gateway.observability.metrics import Metrics
from gateway.redis import keys
from gateway.routing.jain import ServiceWindow
from gateway.routing.vtc_store import ACTIVE_WINDOW_S, Candidate, FairShareStore

log = logging.getLogger("sluicegate.fair_share")

# The replicas where a team waits or has requests in flight say so every HEARTBEAT_S, which keeps
# it active in Redis (vtc_store.ACTIVE_WINDOW_S).
HEARTBEAT_S = 1.0
# Updates wait this long to be sent, so that those of many requests go in one call and what the
# request path writes to Redis (a usage record that frees a concurrency slot) goes first.
BATCH_S = 0.005
# The Jain index is over the weighted service of the last this many dispatches' settlements.
_JAIN_WINDOW = 512


class PoolShare:
    """One pool's counters. `backlog()` names the teams waiting in this replica's queue."""

    def __init__(
        self,
        pool: str,
        metrics: Metrics,
        store: FairShareStore | None,
        backlog: Callable[[], Collection[str]],
    ) -> None:
        self.pool = pool
        self._metrics = metrics
        self._store = store
        self._backlog = backlog
        self.counters: dict[str, float] = {}
        self._pending: list[tuple[str, str, float]] = []
        self._task: asyncio.Task[None] | None = None
        self._sending = False  # a batch of updates is on its way to Redis
        self._wake: asyncio.Event | None = None  # made by the task, on its own loop
        self._served = ServiceWindow(_JAIN_WINDOW)
        self._labelled: set[str] = set()  # teams with series to remove when the pool goes
        self._waiting: dict[str, int] = {}
        # Charges made here and not yet corrected, per team: those teams stay active in Redis.
        self._inflight: dict[str, int] = {}
        # Of those charges, how much never reached Redis (dropped): a correction refunds no more
        # than Redis was charged, or a team would come out of an outage with credit.
        self._undelivered: dict[str, float] = {}
        # When Redis last took updates, and whether some were dropped since: past the window,
        # Redis has forgotten the teams whose heartbeats were dropped, and lifts them on return.
        self._reached_at = time.monotonic()
        self._failing = False
        self._closed = False
        # Whether the pool is contended (see `contended`): when a team last waited here, whether
        # Redis said a team waited on any replica within the window (until it is first asked:
        # yes, so a replica that knows nothing charges), and when it was last asked for that alone.
        self._waited_at = -math.inf
        self._remote_waited = True
        self._asked_at = -math.inf
        self._asking = False
        metrics.fair_share_jain.labels(pool).set_function(self.jain_index)

    def attach(self, store: FairShareStore | None) -> asyncio.Task[None] | None:
        """Returns the update task it cancelled (None: the app is stopping; what is pending is
        not sent), for the caller to await before it closes Redis."""
        self._store = store
        task = self._task
        if store is None and task is not None:
            task.cancel()
            self._pending.clear()
            return task
        return None

    def remote(self, *, count: bool = True) -> bool:
        """Whether a pick may ask Redis now (else it is local, and counted so when `count`)."""
        if self._store is None:
            return False
        if not self._store.available:
            if count:
                self._fallback("pick")
            return False
        return True

    def contended(self) -> bool:
        """Whether a dispatch here is charged: a team waited here within the window, or on any
        replica when Redis last answered. Counters only choose between waiting teams, so a pool
        nobody waits in skips the charge (and its correction: a ticket with no charge settles
        nothing), which saves the fair-share traffic of most requests. Such a pool asks Redis
        once a window whether another replica has a waiter now; a replica whose own team starts
        to wait charges at once and tells Redis ("w" heartbeats), and the others learn it from
        their next answer. Teams active in that lag start even when contention begins: the
        window's history is what the skipped charges would have carried."""
        now = time.monotonic()
        window = ACTIVE_WINDOW_S if self._store is None else self._store.window_s
        if self._waiting or now - self._waited_at < window:
            return True
        if self._store is None or not self._store.available:
            return False
        if self._remote_waited:
            return True
        if now - self._asked_at >= window:
            self._asked_at = now
            self._asking = True
            self._start()
        return False

    # -- updates (sync: called from dispatch and settlement) ----------------------------------

    def charge(self, team: str, amount: float) -> None:
        self.counters[team] = self.counters.get(team, self._least()) + amount
        self.picked(team)
        self._send_later("c", team, amount)

    def picked(self, team: str) -> None:
        """A request of `team` was dispatched on a charge Redis made with its pick."""
        self._inflight[team] = self._inflight.get(team, 0) + 1

    def refund(self, team: str, amount: float) -> None:
        """Gives back a pick's charge that no request took (the waiter chosen ahead left)."""
        if team in self.counters:
            self.counters[team] -= amount
        self._send_later("s", team, -amount)
        self._send_later("r", team, amount)

    def correct(self, team: str, amount: float, charged: float) -> None:
        """One charge of `charged` (`charge` or `picked`) is settled: `amount` is actual -
        charged. Called exactly once per charge, also when `amount` is 0."""
        left = self._inflight.get(team, 0) - 1
        if left > 0:
            self._inflight[team] = left
        else:
            self._inflight.pop(team, None)
        if amount and team in self.counters:
            self.counters[team] += amount
        # Redis holds `charged - gone` of this charge (gone: the part it may never have got).
        lost = self._undelivered.get(team, 0.0)
        gone = min(charged, lost)
        if left > 0 and lost > gone:
            self._undelivered[team] = lost - gone
        else:
            self._undelivered.pop(team, None)
        if amount + gone:
            self._send_later("s", team, amount + gone)
        if charged > gone:
            self._send_later("r", team, charged - gone)
        if left <= 0 and team not in self._waiting:
            self._idle()

    def settled(self, team: str, weighted: float) -> None:
        """A settled request's actual weighted cost, for the Jain index."""
        self._served.add(team, weighted)

    def backlog_changed(self, team: str, waiting: int) -> int:
        """The number of the team's requests waiting here changed; returns the number before."""
        before = self._waiting.get(team, 0)
        self._waited_at = time.monotonic()  # a team waits, or did until now
        m = self._metrics
        if waiting:
            self._waiting[team] = waiting
            if not self._closed:
                self._labelled.add(team)
                m.fair_share_backlog.labels(self.pool, team).set(waiting)
        else:
            self._waiting.pop(team, None)
            # Its series go with it: a pool's team labels are bounded by the teams waiting now.
            self._labelled.discard(team)
            for metric in (m.fair_share_service, m.fair_share_backlog):
                with contextlib.suppress(KeyError):
                    metric.remove(self.pool, team)
            if team not in self._inflight:
                self._idle(except_team=team)  # which may be being dispatched right now
        if waiting and not before:
            self._backlogged(team)
        return before

    def _backlogged(self, team: str) -> None:
        """`team` has just begun waiting here: it is lifted to the least counter of the teams
        waiting (locally; Redis does the same across replicas), never lowered to it."""
        others = [self.counters[t] for t in self._backlog() if t != team and t in self.counters]
        if others:
            least = min(others)
            if self.counters.get(team, least) <= least:
                self.counters[team] = least
        # Redis hears of it with the next pick or batch (heartbeats name every waiting team),
        # at once even if it is served before then: other replicas charge again from then on.
        self._send_later("w", team, 0.0)

    def _idle(self, except_team: str | None = None) -> None:
        """A team stopped waiting and has nothing in flight here: forget the local counters of
        idle teams that cannot matter any more (at or under the least active one, where such a
        team would be lifted to anyway), all of them once nobody is active."""
        active = {*self._waiting, *self._inflight}
        if except_team is not None:
            active.add(except_team)
        least = min((self.counters[t] for t in active if t in self.counters), default=None)
        if least is None:
            self.counters.clear()
            return
        for team in [t for t, c in self.counters.items() if c <= least and t not in active]:
            del self.counters[team]

    def _least(self) -> float:
        waiting = [self.counters[t] for t in self._backlog() if t in self.counters]
        return min(waiting, default=0.0)

    def _send_later(self, kind: str, team: str, amount: float) -> None:
        if self._store is None:
            return
        self._pending.append((kind, team, amount))
        if len(self._pending) > 4096:  # Redis has been down for a while: keep the newest
            self._dropped(self._pending[:2048])
            del self._pending[:2048]
        self._start()

    def _start(self) -> None:
        """Has the update task send what is pending (it starts one if none runs)."""
        if self._store is None:
            return
        if self._task is None:
            # In a context of its own: the flush serves every request of the pool, not the one
            # that happened to start it, so it carries none of that request's context (its trace
            # span, its call count in tests/perf), however long it outlives the request.
            self._task = asyncio.get_running_loop().create_task(self._flush(), context=contextvars.Context())
        elif self._wake is not None:
            self._wake.set()

    async def _flush(self) -> None:
        """Sends pending updates, and heartbeats for the teams waiting here, until there are
        neither."""
        wake = self._wake = asyncio.Event()
        try:
            await asyncio.sleep(BATCH_S)
            while (store := self._store) is not None:
                updates, self._pending = self._pending, []
                waiting = self._backlog()
                updates += [("w", team, 0.0) for team in waiting]
                updates += [("b", team, 0.0) for team in self._inflight if team not in waiting]
                asking, self._asking = self._asking, False
                if updates or asking:
                    if store.available:
                        self._sending = True
                        try:
                            self._refresh(await store.call(self.pool, updates, ()))
                            self._reached(store)
                        except StoreUnavailable as exc:
                            log.warning("fair share update failed pool=%s error=%s", self.pool, exc.reason)
                            self._dropped(updates)
                        finally:
                            self._sending = False
                    else:
                        self._dropped(updates)
                # At most one update per BATCH_S per pool: under load the next batch gathers
                # what arrived meanwhile instead of a round trip per request.
                await asyncio.sleep(BATCH_S)
                if self._pending:
                    continue
                if not self._active():
                    return
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(HEARTBEAT_S):
                        await wake.wait()
                        await asyncio.sleep(BATCH_S)
        finally:
            self._task = self._wake = None

    def _active(self) -> list[str]:
        """The teams waiting here or with charges not yet corrected here (heartbeats)."""
        return list(dict.fromkeys([*self._backlog(), *self._inflight]))

    # -- choosing -----------------------------------------------------------------------------

    async def pick(self, candidates: Sequence[Candidate]) -> int | None:
        """The index of the candidate to serve, chosen and charged in Redis with the pending
        updates; None when Redis could not answer (the caller picks locally and charges)."""
        store = self._store
        if store is None or not store.available:
            if store is not None:
                self._fallback("pick")
            return None
        # Pending updates ride along, unless a batch is on its way: a correction must not overtake
        # the charge it corrects (it is dropped when its team is not there yet).
        updates: list[tuple[str, str, float]] = []
        if not self._sending:
            updates, self._pending = self._pending, []
        try:
            reply = await store.call(self.pool, updates, candidates)
        except StoreUnavailable as exc:
            log.warning("fair share pick failed pool=%s error=%s", self.pool, exc.reason)
            self._fallback("pick")
            self._failing = True
            if updates:
                self._dropped(updates)
            return None
        self._reached(store)
        chosen = int(reply[0]) - 1
        if not 0 <= chosen < len(candidates):
            return None
        self._refresh(reply)
        return chosen

    def local_pick(self, candidates: Sequence[Candidate]) -> int:
        """The same choice as vtc.lua's, on the local copy."""
        best, key = 0, (-candidates[0][1], self.counters.get(candidates[0][0], 0.0))
        for i, (team, band, _) in enumerate(candidates[1:], 1):
            mine = (-band, self.counters.get(team, 0.0))
            if mine < key:
                best, key = i, mine
        return best

    def _refresh(self, reply: list[Any]) -> None:
        """The reply names every active team: it replaces the local copy, but for teams active
        here that Redis has not heard of yet (their updates are still pending)."""
        fresh = {keys.as_text(reply[i]): float(reply[i + 1]) for i in range(1, len(reply) - 1, 2)}
        if len(reply) % 2 == 0:  # ends with whether a team waited on any replica (vtc.lua)
            self._remote_waited = bool(int(reply[-1]))
        for team in self._active():
            if team not in fresh and team in self.counters:
                fresh[team] = self.counters[team]
        self.counters = fresh
        if self._closed:
            return
        gauge = self._metrics.fair_share_service
        for team in self._waiting:
            if team in self.counters:
                self._labelled.add(team)
                gauge.labels(self.pool, team).set(self.counters[team])

    def _reached(self, store: FairShareStore) -> None:
        """Redis took a call. If updates were dropped for longer than the window before, it
        forgot the teams in flight here meanwhile (and lifted them since, maybe in this very
        call): no refund of their earlier charges may follow them onto the new counters."""
        now = time.monotonic()
        if self._failing and now - self._reached_at >= store.window_s:
            for team in self._inflight:
                self._undelivered[team] = math.inf
        self._failing = False
        self._reached_at = now

    def _dropped(self, updates: Sequence[tuple[str, str, float]]) -> None:
        """Updates that will never be sent: their charges are not to be refunded."""
        self._failing = True
        for kind, team, amount in updates:
            if kind == "c" and team in self._inflight:
                self._undelivered[team] = self._undelivered.get(team, 0.0) + amount
        self._fallback("update")

    def _fallback(self, op: str) -> None:
        self._metrics.fair_share_fallbacks.labels(self.pool, op).inc()

    # -- reading ------------------------------------------------------------------------------

    def jain_index(self) -> float:
        """Jain's fairness index over the weighted service the teams waiting here now got in the
        last dispatches (gateway/routing/jain.py)."""
        return self._served.jain_index(set(self._backlog()))

    def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
        m = self._metrics
        for team in self._labelled:
            for metric in (m.fair_share_service, m.fair_share_backlog):
                with contextlib.suppress(KeyError):
                    metric.remove(self.pool, team)
        with contextlib.suppress(KeyError):
            m.fair_share_jain.remove(self.pool)
        for op in ("pick", "update"):
            with contextlib.suppress(KeyError):
                m.fair_share_fallbacks.remove(self.pool, op)
