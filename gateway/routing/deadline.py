"""Deadlines: how long a request can wait for its first token, and the estimate of a saturated
pool's wait that refuses at once the requests that cannot make theirs.

A request's deadline is the `x-sluicegate-deadline-ms` header, else its key's
`default_deadline_ms`, else its team's (a key's overrides its team's either way: a deadline is
the caller's need, not a privilege). It counts from the request's arrival at the gateway.

Where it matters: in a saturated pool's queue (gateway/routing/tokenqueue.py). Within one team's
requests of one priority band the earliest deadline goes first (no deadline: after those with
one); which team goes next stays the fair share's, so marking everything urgent gains a team no
service. A request whose estimated wait ends past its deadline is refused at once, 503
`deadline_unreachable`, on arrival and whenever the queue moves (`DeadlineWatch`); one whose
deadline passes while it waits leaves then, never silently at the pool's `max_queue_wait`.

The estimate: a slot frees every `hold / slots` seconds on average (`hold`: the pool's recent
time a request holds a slot, a moving average; `slots`: usable endpoints x
`max_inflight_per_endpoint`), so the request behind `ahead` others waits about
`(ahead + 1) x hold / slots`. `ahead` counts the waiters of higher bands, its own team's with an
earlier deadline, and of each other team in its band as many as fair share serves meanwhile
(tokenqueue.TokenQueue.ahead). Until a pool has served a request there is no estimate, and only
the deadline itself refuses. What it leaves out (the prefill after the slot) the histogram of its
error shows.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from gateway.errors import ErrorCode, GatewayError
from gateway.limits.spec import MAX_DEADLINE_MS

DEADLINE_HEADER = "x-sluicegate-deadline-ms"
# Weight of the newest slot hold in the moving average: about the last ten requests count.
HOLD_ALPHA = 0.2
# A queue that moves fast is re-checked at most this often (the deadline's own timer is exact).
RECHECK_S = 0.05


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
