"""The batch engine, one per replica: it runs batch lines on capacity interactive requests leave
idle, and moves each active batch through its steps (validation, lines, finalize).

Every replica looks at every active batch (the list is in Redis) each `batch_poll_interval_s`, or
at once when woken (a batch created or cancelled here). It starts a line for a model only while,
on one of the model's pools:

- no interactive request waits in that pool's queue on this replica,
- the pool's requests in flight here (interactive and batch) and this replica's batch lines of
  the model are below `batch_share` of the pool's slots (usable endpoints x
  max_inflight_per_endpoint),
- no usable endpoint of the pool reports waiting requests in its scraped load,

and the team's running lines (every replica's) are below its `batch_max_inflight`. A line never
takes a place in a pool's queue (RouteRequest.no_wait): an interactive request never waits behind
a line that has not started. Claims are leases in Redis, renewed while a line runs; a replica that
dies lets them lapse, and another replica runs those lines again (gateway/batch/batchstore.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from gateway.batch.batchstore import CLAIMED, BatchStore
from gateway.batch.lifecycle import Lifecycle
from gateway.batch.metrics import BatchMetrics
from gateway.batch.records import Batch
from gateway.batch.runner import LineRunner
from gateway.errors import GatewayError, StoreUnavailable
from gateway.files.storage import FileStorage, StorageError
from gateway.keys.auth import Principal
from gateway.keys.store import KeyStore
from gateway.limits.spec import LimitSet
from gateway.proxy.dialect import Dialect
from gateway.proxy.pipeline import Pipeline
from gateway.routing.router import ModelRoute, Router
from gateway.state import AppState

log = logging.getLogger("sluicegate.batch")

# Lines of a batch that cannot run (its key revoked or denied batches, its model gone) are failed
# this many at a time per replica, and per look: each line ending wakes the engine for the next.
# Not all at once: a batch has up to max_batch_lines lines, each a task and its writes.
DEAD_LINES_AT_ONCE = 16


def interactive_limits(limits: LimitSet) -> LimitSet:
    """The limits with what guards interactive traffic taken out (requests and tokens per minute,
    concurrency, a first token's default deadline): a batch line is held to budgets, and to its
    team's batch_max_inflight."""
    per_model = {
        name: dataclasses.replace(one, rpm=None, tpm=None, max_concurrency=None)
        for name, one in limits.per_model.items()
    }
    return dataclasses.replace(
        limits, rpm=None, tpm=None, max_concurrency=None, default_deadline_ms=None, per_model=per_model
    )


def idle_for_batch(route: ModelRoute, mine: int, starting: int = 0) -> bool:
    """Whether a line of this model may start now, with `mine` of its lines running on this
    replica (the rules in the module's docstring). `starting` lines were just started and may not
    hold their slot yet: they count as in flight, or one wake would start lines up to the share
    beside whatever interactive requests hold (counted twice once routed, which errs on the side
    of the interactive requests until the next look)."""
    for pool in route.pools:
        usable = [e for e in pool.endpoints if e.usable]
        if not usable or pool.queue:
            continue
        share = pool.model.routing.batch_share * len(usable) * pool.max_inflight
        inflight = sum(e.inflight for e in pool.endpoints) + starting
        if inflight >= share or mine >= share:
            continue
        if any(e.waiting > 0 for e in usable):
            continue
        return True
    return False


class BatchEngine:
    def __init__(
        self,
        store: BatchStore,
        lifecycle: Lifecycle,
        storage: FileStorage,
        router: Router,
        keystore: KeyStore,
        pipeline: Pipeline,
        dialects: Mapping[str, Dialect[Any]],
        metrics: BatchMetrics,
        *,
        lease_s: float,
        poll_interval_s: float,
    ) -> None:
        self._store = store
        self._lifecycle = lifecycle
        self._router = router
        self._keystore = keystore
        self._metrics = metrics
        self._lease_s = lease_s
        self._poll_s = poll_interval_s
        self.token = secrets.token_hex(8)  # this replica's claims
        self._runner = LineRunner(store, storage, pipeline, dialects, self.token)
        self._wake = asyncio.Event()
        self._state: AppState | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._renew_task: asyncio.Task[None] | None = None
        self._steps: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._lines: dict[tuple[str, str, int], asyncio.Task[None]] = {}
        self._per_model: Counter[str] = Counter()
        # Lines started in this look (any batch), per model, that may not hold their slot yet
        # (idle_for_batch). A look that comes while a line of the last one is still on its way to
        # its slot (a step ending then) can start one line too many; the next line's end corrects.
        self._starting: Counter[str] = Counter()
        self._turn = 0
        # Per batch, its lines being failed here (DEAD_LINES_AT_ONCE).
        self._dead: Counter[tuple[str, str]] = Counter()
        self.started_lines = 0  # for tests and the log: lines this replica started
        self.peak_lines = 0  # for tests: the most line tasks this replica held at once
        self.peak_look = 0  # for tests: the most lines one look at a batch started

    def start(self, state: AppState) -> None:
        self._state = state
        self._loop_task = asyncio.ensure_future(self._run())
        self._renew_task = asyncio.ensure_future(self._renew())

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        """Stops starting lines; lines running are cut and given back to the queue, so another
        replica runs them again (a rollout loses no line; their partial work is redone, not
        billed). A give-back that fails leaves the lease to lapse: the same, later."""
        running = list(self._lines)
        for task in (self._loop_task, self._renew_task, *self._steps.values(), *self._lines.values()):
            if task is not None:
                task.cancel()
        for task in (self._loop_task, self._renew_task, *self._steps.values(), *self._lines.values()):
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        with contextlib.suppress(StoreUnavailable, OSError, TimeoutError):
            async with asyncio.timeout(2.0):
                for team, batch_id, line in running:
                    await self._store.release(team, batch_id, line, self.token, retry=False)

    async def _run(self) -> None:
        backoff = self._poll_s
        while True:
            try:
                await self._tick()
                backoff = self._poll_s
            except (OSError, StorageError, GatewayError) as exc:  # StoreUnavailable among them
                log.warning("batch engine: %s; trying again", type(exc).__name__)
                backoff = min(backoff * 2, 5.0)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(backoff):
                    await self._wake.wait()

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self._lease_s / 3)
            by_batch: dict[tuple[str, str], list[int]] = {}
            for team, batch_id, line in self._lines:
                by_batch.setdefault((team, batch_id), []).append(line)
            for (team, batch_id), lines in by_batch.items():
                with contextlib.suppress(StoreUnavailable, OSError):
                    await self._store.renew(team, batch_id, self.token, lines, self._lease_s)

    async def _tick(self) -> None:
        queued: Counter[tuple[str, str]] = Counter()
        self._starting.clear()
        active = await self._store.active()
        # Each tick starts from the next batch: free slots go round the batches, not to the first.
        self._turn = (self._turn + 1) % max(1, len(active))
        for team, batch_id in active[self._turn :] + active[: self._turn]:
            batch = await self._store.get(team, batch_id)
            if batch is None:
                await self._store.forget_active(team, batch_id)
                continue
            await self._advance(batch)
            if batch.status == "in_progress":
                queued[(self._pool_of(batch.model), team)] += await self._store.pending(team, batch_id)
        self._metrics.queued(queued)

    async def _advance(self, batch: Batch) -> None:
        status = batch.status
        if status == "validating":
            self._step(batch, self._lifecycle.validate(batch))
            return
        if status == "in_progress" and time.time() >= batch.expires_at and not batch.expiring:
            await self._store.stop(batch.team, batch.id, "expiring")
        if status in ("in_progress", "cancelling", "finalizing"):
            ending = await self._store.finalizing(batch.team, batch.id)
            if ending:
                batch.status = "finalizing"
                self._step(batch, self._lifecycle.finalize(batch, ending))
                return
        if status == "in_progress":
            await self._start_lines(batch)
        elif status not in ("cancelling", "finalizing"):
            await self._store.forget_active(batch.team, batch.id)

    def _step(self, batch: Batch, step: Any) -> None:
        key = (batch.team, batch.id)
        running = self._steps.get(key)
        if running is not None and not running.done():
            step.close()
            return
        task = asyncio.ensure_future(step)
        self._steps[key] = task
        task.add_done_callback(lambda done: self._stepped(key, done))

    def _stepped(self, key: tuple[str, str], done: asyncio.Task[None]) -> None:
        if self._steps.get(key) is done:
            del self._steps[key]
        if not done.cancelled() and done.exception() is not None:
            log.warning("batch step failed: %s", type(done.exception()).__name__)
        self.wake()

    def _pool_of(self, model: str) -> str:
        """The pool a model's lines are counted under in the metrics (its first; "none" for a
        model the table no longer has)."""
        route = self._router.resolve(model)
        return route.pools[0].name if route is not None and route.pools else "none"

    def idle(self, route: ModelRoute) -> bool:
        name = route.model.name
        return idle_for_batch(route, self._per_model[name], self._starting[name])

    async def _principal(self, batch: Batch) -> tuple[Principal | None, int | None]:
        """The batch's key as a line's caller (None: revoked, expired, denied batches, or its team
        gone), with the team's batch_max_inflight."""
        try:
            key = await self._keystore.key(batch.key_id)
        except GatewayError:
            return None, None
        team = await self._keystore.team_info(batch.team)
        if key.refusal(time.time()) is not None or team is None or not key.belongs_to(team):
            return None, None
        if team.id != batch.team_id:
            return None, None
        # Review of issue 44: a key (or team) denied batches after the batch was made runs no more
        # of its lines, as a revoked key's do not.
        if key.limits.batches is False or team.limits.batches is False:
            return None, None
        key = dataclasses.replace(key, limits=interactive_limits(key.limits))
        return Principal(key, interactive_limits(team.limits), team.id), team.limits.batch_max_inflight

    async def _start_lines(self, batch: Batch) -> None:
        route = self._router.resolve(batch.model)
        if route is not None and not self.idle(route):
            return  # no capacity to give: no key lookup either
        principal, max_inflight = await self._principal(batch)
        dead = principal is None or route is None
        started = 0
        while dead or (route is not None and self.idle(route)):
            # One look starts at most that many as well: the rest wait for the next look (woken as
            # each ends), and the other batches get their turn in between.
            if dead and max(started, self._dead[(batch.team, batch.id)]) >= DEAD_LINES_AT_ONCE:
                return
            code, line = await self._store.claim(
                batch, self.token, lease_s=self._lease_s, max_inflight=max_inflight
            )
            if code != CLAIMED:
                return
            key = (batch.team, batch.id, line)
            # Review of issue 44: this replica's own lease, lapsed while the line still runs here
            # and claimed back under the same token: the running line holds it again (renewed).
            if key in self._lines:
                continue
            self._per_model[batch.model] += 1
            self.started_lines += 1
            self._starting[batch.model] += 1
            if dead:
                self._dead[(batch.team, batch.id)] += 1
            self._lines[key] = asyncio.ensure_future(self._line(batch, line, principal, route, dead))
            started += 1
            self.peak_lines = max(self.peak_lines, len(self._lines))
            self.peak_look = max(self.peak_look, started)

    async def _line(
        self, batch: Batch, line: int, principal: Principal | None, route: ModelRoute | None, dead: bool
    ) -> None:
        pool = self._pool_of(batch.model)
        self._metrics.running(pool, batch.team, +1)
        kind = "error"
        try:
            if principal is None:
                outcome = await self._runner.fail(
                    batch,
                    line,
                    "invalid_api_key",
                    "The batch's API key is revoked, expired, gone or denied batches.",
                )
            else:
                assert self._state is not None
                outcome = await self._runner.run(batch, line, principal, self._state)
            kind = outcome.kind
        except (StoreUnavailable, OSError, StorageError) as exc:
            # The lease lapses and the line runs again (here or elsewhere).
            log.warning("batch line %s:%d: %s", batch.id, line, type(exc).__name__)
        finally:
            self._metrics.running(pool, batch.team, -1)
            self._metrics.done(pool, batch.team, kind)
            self._per_model[batch.model] -= 1
            self._lines.pop((batch.team, batch.id, line), None)
            if dead:
                self._dead[(batch.team, batch.id)] -= 1
                if self._dead[(batch.team, batch.id)] <= 0:
                    del self._dead[(batch.team, batch.id)]
            self.wake()
