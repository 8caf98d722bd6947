"""Deadlines: how long a request can wait for its first token, and the estimate of a saturated
pool's wait that refuses at once the requests that cannot make theirs.

A request's deadline is the `x-sluicegate-deadline-ms` header, else its key's
`default_deadline_ms`, else its team's (a key's overrides its team's either way: a deadline is
the caller's need, not a privilege). It counts from the request's arrival at the gateway.

Where it matters: in a saturated pool's queue (gateway/routing/tokenqueue.py). Within one team's
requests of one priority band the earliest deadline goes first (no deadline: after those with
one); which team goes next stays the fair share's, so marking everything urgent gains a team no
service. A request whose estimated wait ends past its deadline is refused at once, 503
`deadline_unreachable`, on arrival and, while it waits, at each re-check (`DeadlineWatch`, every
RECHECK_S); one whose deadline passes while it waits leaves then, never silently at the pool's
`max_queue_wait`.

The estimate: a slot frees every `hold / slots` seconds on average (`hold`: the pool's recent
time a request holds a slot, a moving average; `slots`: usable endpoints x
`max_inflight_per_endpoint`), so the request behind `ahead` others waits about
`(ahead + 1) x hold / slots`. `ahead` counts the waiters of higher bands, its own team's with an
earlier deadline, and of each other team in its band as many as fair share serves meanwhile
(tokenqueue.TokenQueue.ahead). Until a pool has served a request there is no estimate, and only
the deadline itself refuses. It leaves out the prefill after the slot and the requests that arrive
later and go first; `sluicegate_deadline_estimate_error_seconds` shows how far off it is
(bench/deadline_bench.py measures it).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable

from gateway.errors import ErrorCode, GatewayError
from gateway.limits.spec import MAX_DEADLINE_MS
from gateway.observability.metrics import Metrics
from gateway.routing.fairqueue import FairQueue
from gateway.routing.share import ShareTicket
from gateway.routing.tokenqueue import TokenQueue

DEADLINE_HEADER = "x-sluicegate-deadline-ms"
# Weight of the newest slot hold in the moving average: about the last ten requests count.
HOLD_ALPHA = 0.2
# Waiters with deadlines are re-checked this often (each deadline's own timer is exact).
RECHECK_S = 0.05
STAGES = ("arrival", "queued")  # where a refusal came: sluicegate_deadline_refusals_total's label


def deadline_ms(header: str | None, key_default: int | None, team_default: int | None) -> int | None:
    """The request's deadline in ms (None: none); a header that is not a whole number of
    milliseconds from 1 to a day is a 400 naming it."""
    if header is None:
        return key_default if key_default is not None else team_default
    text = header.strip()
    # isascii: str.isdigit() also takes digits int() refuses; the length keeps int() cheap.
    if not (text.isascii() and text.isdigit() and len(text) <= 12 and 1 <= int(text) <= MAX_DEADLINE_MS):
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            f"The '{DEADLINE_HEADER}' header must be a whole number of milliseconds from 1 to "
            f"{MAX_DEADLINE_MS} (a day).",
            param=DEADLINE_HEADER,
        )
    return int(text)


def wait_estimate(ahead: int, hold_s: float | None, slots: int) -> float | None:
    """Seconds until the request behind `ahead` others gets a slot; None: not known yet."""
    if hold_s is None or slots <= 0:
        return None
    return (ahead + 1) * hold_s / slots


def unreachable(model: str, estimate_s: float | None) -> GatewayError:
    """The 503 for a request that cannot get its first token before its deadline."""
    wait = "" if estimate_s is None else f" (about {estimate_s:.1f}s to wait for a free one)"
    retry = 1 if estimate_s is None else max(1, min(math.ceil(estimate_s), 3600))
    return GatewayError(
        ErrorCode.DEADLINE_UNREACHABLE,
        f"Every worker for model '{model}' is busy{wait}: the request cannot get its first token "
        "before its deadline.",
        headers={"retry-after": str(retry)},
    )


class DeadlineWatch:
    """Re-checks a queue's waiters with deadlines as it moves: `poke()` when one arrives, and
    `check()` (which refuses those that can no longer make it) runs every RECHECK_S on the event
    loop for as long as some waiter has a deadline (`pending()`), then stops."""

    def __init__(self, check: Callable[[], None], pending: Callable[[], bool]) -> None:
        self._check = check
        self._pending = pending  # whether any waiter has a deadline
        self._handle: asyncio.TimerHandle | None = None

    def poke(self) -> None:
        if self._handle is None:
            self._handle = asyncio.get_running_loop().call_later(RECHECK_S, self._run)

    def _run(self) -> None:
        self._handle = None
        self._check()
        if self._pending():
            self.poke()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class PoolDeadlines:
    """One pool's deadlines: the estimate of its queue's wait, the refusals, the re-check of its
    waiters and the metrics. `hold()`: the pool's moving average of a slot's hold (the pool keeps
    it, inline on every release); `slots()`: its usable slots now."""

    def __init__(
        self,
        pool: str,
        model: str,
        metrics: Metrics,
        queue: FairQueue[object] | TokenQueue[object],
        *,
        hold: Callable[[], float | None],
        slots: Callable[[], int],
        clock: Callable[[], float],
    ) -> None:
        self._pool, self._model, self._metrics = pool, model, metrics
        self._queue = queue
        self._hold, self._slots, self._clock = hold, slots, clock
        self._watch = DeadlineWatch(self._refuse_late, lambda: queue.with_deadline > 0)

    def estimate(self, ahead: int) -> float | None:
        """Seconds a request behind `ahead` waiters waits for a slot (None: not known yet)."""
        return wait_estimate(ahead, self._hold(), self._slots())

    def arrival(self, ticket: ShareTicket, now: float, max_wait: float) -> tuple[float | None, float, bool]:
        """A request joins the queue: (its estimated wait, how long it may wait, whether that is
        its deadline's); raises the 503 when its deadline cannot be met."""
        queue = self._queue
        estimate = self.estimate(queue.ahead(ticket) if isinstance(queue, TokenQueue) else len(queue))
        if ticket.deadline is None:
            return estimate, max_wait, False
        left = ticket.deadline - now
        if left <= 0 or (estimate is not None and estimate > left):
            raise self.refused("arrival", estimate)
        self._watch.poke()
        return (estimate, left, True) if left < max_wait else (estimate, max_wait, False)

    def refused(self, stage: str, estimate: float | None) -> GatewayError:
        self._metrics.deadline_refusals.labels(self._pool, stage).inc()
        return unreachable(self._model, estimate)

    def served(self, waited: float, estimate: float | None) -> None:
        """A queued request got its slot after `waited` s: the estimate's error."""
        if estimate is not None:
            self._metrics.deadline_estimate_error.labels(self._pool).observe(waited - estimate)

    def missed(self) -> None:
        """A request's first output came after its deadline."""
        self._metrics.deadline_misses.labels(self._pool).inc()

    def _refuse_late(self) -> None:
        """DeadlineWatch's check: waiters that can no longer make their deadline leave now."""
        queue = self._queue
        if isinstance(queue, TokenQueue):
            for waiter, wait in queue.late(self._clock(), self.estimate):
                queue.refuse(waiter, wait)

    def close(self) -> None:
        self._watch.close()
        m = self._metrics
        for metric in (m.deadline_misses, m.deadline_estimate_error):
            with contextlib.suppress(KeyError):
                metric.remove(self._pool)
        for stage in STAGES:
            with contextlib.suppress(KeyError):
                m.deadline_refusals.remove(self._pool, stage)
