"""Request limits for the worker calls that generate nothing: a token count by the worker's own
tokenizer (`count_tokens`, `countTokens` on a `tokenize: true` model) and a stored response read
back, listed, cancelled or deleted.

Each costs a worker a call but no tokens, so it counts against the key's and team's requests per
minute and concurrent requests (their own and the model's, the limits `plans.plan` gives), never
against a token limit or a budget. A refusal is the same 429 as on the main routes. The
concurrency slot is held (and its lease renewed) while the call runs, and freed on every way out
by a void usage record: settle.lua releases the slot and meters nothing, so these calls stay out
of the usage report, as before.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import AsyncIterator

from gateway.http.context import RequestContext
from gateway.keys.auth import Principal
from gateway.limits import plans
from gateway.limits.admission import Admission, LimitKind, Reservation
from gateway.limits.limiter import RateLimiter
from gateway.metering.record import UsageRecord
from gateway.observability import tracing
from gateway.observability.metrics import Metrics
from gateway.proxy.settlement import Submitter

REQUEST_KINDS = frozenset({LimitKind.REQUESTS, LimitKind.CONCURRENCY})


class RequestLimits:
    __slots__ = ("_limiter", "_meter", "_metrics")

    def __init__(self, limiter: RateLimiter, meter: Submitter, metrics: Metrics) -> None:
        self._limiter = limiter
        self._meter = meter
        self._metrics = metrics

    @contextlib.asynccontextmanager
    async def held(self, principal: Principal, ctx: RequestContext) -> AsyncIterator[Admission]:
        """Admits one call of `principal` to `ctx.model` under its request limits only, and frees
        its slot when the block ends, however it ends. Raises the 429 of the limit that refused."""
        key = principal.key
        planned = [
            limit
            for limit in plans.plan(
                key.team, principal.team_limits, key.id, key.limits, ctx.model, dt.datetime.now(dt.UTC)
            )
            if limit.kind in REQUEST_KINDS
        ]
        with tracing.phase(ctx.trace, "admit"):
            admission = await self._limiter.admit(key.team, planned, ctx.request_id, Reservation(0, 0))
        if not admission.allowed:
            self._metrics.rate_limited.labels(ctx.model, key.team, *admission.refusal_labels()).inc()
            ctx.refused_by = admission.refusal_labels()
            raise admission.error()
        try:
            yield admission
        finally:
            admission.end()  # its slots stop being renewed; the record below frees them
            if admission.states:  # charged in Redis (not unlimited, not admitted failing open)
                self._meter.submit(_release(ctx, admission))


def _release(ctx: RequestContext, admission: Admission) -> UsageRecord:
    """A void record: settle.lua frees the slots (and drops the admission marker) and meters
    nothing. The requests per minute stay charged: no settlement names them."""
    return UsageRecord(
        request_id=ctx.request_id,
        team=ctx.team,
        key_id=ctx.key_id,
        model=ctx.model,
        prompt_tokens=0,
        completion_tokens=0,
        error=False,
        disconnected=False,
        day=UsageRecord.today(),
        settlements=tuple(admission.settlements(0, 0)),
        void=True,
    )
