"""What a client is told when a pool cannot take its request: why, in words that name no
endpoint, and when to try again (`retry-after`)."""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence

from gateway.routing.endpoint import CONFIRM_INTERVAL_S, Endpoint

# An ejection backs off to `ejection_max` (60 s by default); more than an hour is a typo's doing.
_MAX_RETRY_AFTER_S = 3600


class PoolUnavailable(Exception):
    """No usable endpoint: the caller moves on to the model's other pools, then its fallbacks.

    The message names the pool, never an endpoint's URL: it reaches the client (the log keeps
    the URLs). `retry_after_s`: when something may change (an ejection ends, a probe is due);
    None when nothing is scheduled to."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def retry_after(seconds: float | None) -> str:
    """A `retry-after` value: whole seconds, rounded up, at least 1 (1 when nothing is due)."""
    if seconds is None or seconds <= 1:
        return "1"
    return str(min(math.ceil(seconds), _MAX_RETRY_AFTER_S))


def why_unavailable(pool: str, endpoints: Sequence[Endpoint]) -> str:
    """Counts by state, no URL: this text reaches the client."""
    if not endpoints:
        return f"pool '{pool}' has no endpoints"
    counts = collections.Counter(e.state.value for e in endpoints)
    states = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    return f"pool '{pool}' has no healthy endpoint ({states})"


def next_chance_s(endpoints: Sequence[Endpoint], probe_interval: float, now: float) -> float | None:
    """Seconds until one of `endpoints` may take requests again: the soonest ejection end or
    `/health` probe due (a pending one is checked about once a second); None when no endpoint is
    waiting for either."""
    soonest: float | None = None
    for endpoint in endpoints:
        if endpoint.removed:
            continue
        if not endpoint.confirmed:
            due = CONFIRM_INTERVAL_S
        elif not endpoint.probe_ok or endpoint.ejected_until is not None:
            # Back only once its probe passes AND its ejection is over: the later of the two.
            ejected_until = endpoint.ejected_until
            probe = 0.0 if endpoint.probe_ok else endpoint.last_probe_at + probe_interval - now
            due = max(probe, 0.0 if ejected_until is None else ejected_until - now)
        else:
            continue
        soonest = due if soonest is None else min(soonest, due)
    return None if soonest is None else max(soonest, 0.0)
