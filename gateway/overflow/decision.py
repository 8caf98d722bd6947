"""Whether a request overflows: the model's pools and fallbacks first, an external provider last.

A request may overflow when all of these hold:
- its team allows it and its key does not deny it (`limits.spec.overflow_allowed`), it speaks the
  chat contract (a native Messages or Responses call, or one that continues a stored response,
  stays with the workers that hold its state), and its model names providers;
- no pool of its plan (the model's pools, then its fallback models') can give it a slot in time:
  none has a usable endpoint, or each one's queue wait, as the deadlines estimate it
  (gateway/routing/deadline.py), exceeds `after_ms` or what is left of the request's deadline. A
  full pool that has served nothing yet has no estimate: it cannot promise a time, so it counts
  as not in time;
- a provider is under its `max_concurrency` and its breaker is closed (gateway/overflow/providers.py).

A request that may not overflow, whose plan has no usable endpoint or cannot meet its deadline,
is refused at once with 503 `overflow_not_allowed`: an overflow could have served it, and the
client learns why it was not. One that merely waits longer than `after_ms` waits in the queue as
it would without an overflow. When every provider is busy or its breaker open, the request goes
on to the pools, which queue or refuse it as they always do; when they have no usable endpoint
either, it is a 503 `overflow_unavailable`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from gateway.errors import ErrorCode, GatewayError
from gateway.observability.metrics import Metrics
from gateway.overflow.providers import ModelOverflow, Provider
from gateway.routing.policy import RouteRequest
from gateway.routing.pool import Pool
from gateway.routing.share import ShareTicket
from gateway.routing.tokenqueue import TokenQueue
from gateway.routing.unavailable import retry_after


def slot_within(pool: Pool, route: RouteRequest, within_s: float) -> bool:
    """Whether `pool` can give the request a slot within `within_s` seconds, as far as this replica
    can tell now (a free slot, or a queue whose estimated wait fits)."""
    limit = pool.max_inflight
    usable = [e for e in pool.endpoints if e.usable]
    if not usable:
        return False
    if not pool.queue and any(e.inflight < limit for e in usable):
        return True
    queue = pool.queue
    ticket = route.share if route.share is not None else ShareTicket(route.team, route.share_weight)
    ahead = queue.ahead(ticket) if isinstance(queue, TokenQueue) else len(queue)
    estimate = pool.deadlines.estimate(ahead)
    return estimate is not None and estimate <= within_s


def choose(
    overflow: ModelOverflow,
    plan: Sequence[Pool],
    route: RouteRequest,
    *,
    allowed: bool,
    deadline: float | None,
    metrics: Metrics,
) -> Provider | None:
    """The provider that serves this request, or None when its pools should (see the module)."""
    within = overflow.after_s
    left = None if deadline is None else deadline - time.monotonic()
    if left is not None:
        within = min(within, left)
    if any(slot_within(pool, route, within) for pool in plan):
        return None
    if not allowed:
        down = not any(pool.has_usable() for pool in plan)
        missed = left is not None and not any(slot_within(pool, route, left) for pool in plan)
        if down or missed:
            metrics.overflow_refusals.labels(overflow.model, "denied").inc()
            raise GatewayError(
                ErrorCode.OVERFLOW_NOT_ALLOWED,
                f"No worker for model '{overflow.model}' can serve the request "
                f"{'now' if down else 'before its deadline'}, and this key's team does not allow "
                "overflow to an external provider (an admin can allow it: docs/overflow.md).",
                headers={"retry-after": retry_after(_soonest(plan))},
            )
        return None
    provider = overflow.available()
    if provider is None:
        metrics.overflow_refusals.labels(overflow.model, "busy").inc()
        if not any(pool.has_usable() for pool in plan):
            # Nothing to wait for either: the platform's capacity failed, not the client's limit.
            chances = [s for s in (p.retry_after_s() for p in overflow.providers) if s is not None]
            raise GatewayError(
                ErrorCode.OVERFLOW_UNAVAILABLE,
                f"No worker for model '{overflow.model}' is available, and its overflow providers are "
                "busy or failing; try again shortly.",
                headers={"retry-after": retry_after(min(chances, default=None))},
            )
    return provider


def _soonest(plan: Sequence[Pool]) -> float | None:
    """Seconds until some pool of the plan may take requests again (None: not known)."""
    chances = [s for s in (pool.next_chance_s() for pool in plan) if s is not None]
    return min(chances, default=None)
