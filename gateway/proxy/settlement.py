"""The end of an admitted request, once: what it used, how it ended, and everything that follows
from that (the usage record that settles its limits, token metrics, the in-flight gauge).

The pipeline opens a `Settlement` right after admission and calls `finish()` in a `finally`, so
every way out (an answer, a stream's end, a worker failure, a timeout, a client that left, a bug,
cancellation at shutdown) settles the request exactly once; `finish()` is synchronous so that a
cancelled task still runs it whole. The relay and the pipeline only write down what happened in
the `Outcome`; the decisions below read it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol

from gateway.errors import Failure
from gateway.http.context import RequestContext
from gateway.limits.admission import Admission
from gateway.metering.record import UsageRecord
from gateway.observability.metrics import Metrics
from gateway.pricing import UNPRICED, Price
from gateway.proxy.usage import Usage
from gateway.routing.share import ShareTicket


class Ending(enum.Enum):
    """How a request ended: the access log's `outcome` and the usage record's flags."""

    OK = "ok"
    ERROR = "error"
    DISCONNECTED = "disconnected"


class Submitter(Protocol):
    """What the settlement needs of the meter (gateway.metering.meter.Meter)."""

    def submit(self, usage: UsageRecord) -> None: ...


@dataclass(slots=True)
class Outcome:
    """What the relay saw; written as it happens, read once at the end."""

    usage: Usage | None = None  # the worker's final report, checked
    relayed_usage: Usage | None = None  # the last cumulative report that reached the client
    # The worker's last cumulative report when the gateway cut a client that stopped reading: the
    # engine generated it whether or not the client took it.
    stalled_usage: Usage | None = None
    invalid_usage: bool = False  # the worker reported counts that cannot be real
    reached_worker: bool = False  # a worker answered (its head arrived)
    tokens_relayed: int = 0  # events that carried generated text or tool-call deltas
    estimated_completion: int | None = None  # a whole answer's own estimate, when usage lied
    first_token_at: float | None = None  # perf_counter
    last_token_at: float | None = None
    finish_reason: str | None = None
    # (model, Failure label) of each worker attempt that failed before an answer: retried, or the end
    attempt_failures: list[tuple[str, str]] = field(default_factory=list)
    error_reason: Failure | None = None  # why the worker's answer was bad
    error_status: int = 0  # the worker's status, with Failure.STATUS
    failed: bool = False  # the client got an error (the gateway's, or a worker's refusal)
    disconnected: bool = False

    def error_label(self) -> str:
        """`error_reason` as the metric labels it."""
        return "" if self.error_reason is None else Failure.label(self.error_reason, self.error_status)


@dataclass(slots=True)
class Settlement:
    ctx: RequestContext
    admission: Admission
    estimated_prompt: int
    metrics: Metrics
    meter: Submitter
    outcome: Outcome = field(default_factory=Outcome)
    # The request's token fair-share charges, corrected here to what it used.
    share: ShareTicket | None = None
    # The model's prices when it was admitted: what its usage is recorded as costing.
    price: Price | None = None
    _finished: bool = False

    def __post_init__(self) -> None:
        self.metrics.child(self.metrics.inflight, self.ctx.model).inc()

    def tokens(self) -> tuple[int, int]:
        """The worker's own counts when it gave believable ones; else what the gateway can tell."""
        out = self.outcome
        if self.ctx.unbilled:
            return 0, 0
        if out.usage is not None:
            return out.usage.prompt_tokens, out.usage.completion_tokens
        if out.stalled_usage is not None:
            return out.stalled_usage.prompt_tokens, out.stalled_usage.completion_tokens
        if out.relayed_usage is not None:
            # Left mid-stream: the worker's count up to the last chunk the client received.
            return out.relayed_usage.prompt_tokens, out.relayed_usage.completion_tokens
        if out.failed or (not out.reached_worker and not out.disconnected):
            # The client got an error instead of an answer: refused, a worker that failed or
            # refused, a timeout. Nothing reached it to bill.
            return 0, 0
        completion = out.estimated_completion if out.estimated_completion is not None else out.tokens_relayed
        return self.estimated_prompt, completion

    def ending(self) -> Ending:
        out = self.outcome
        if out.disconnected:
            return Ending.DISCONNECTED
        if out.failed or out.error_reason is not None or out.invalid_usage:
            return Ending.ERROR
        return Ending.OK

    def finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        self.admission.end()  # its slots stop being renewed; the record below frees them
        ctx, out, metrics = self.ctx, self.outcome, self.metrics
        metrics.child(metrics.inflight, ctx.model).dec()
        prompt, completion = self.tokens()
        ending = self.ending()
        for model, reason in out.attempt_failures:
            metrics.child(metrics.upstream_errors, model, reason).inc()
        if out.invalid_usage:
            metrics.child(metrics.upstream_errors, ctx.model, Failure.INVALID_USAGE).inc()
        if out.error_reason is not None:
            metrics.child(metrics.upstream_errors, ctx.model, out.error_label()).inc()
        if out.first_token_at is not None:
            metrics.child(metrics.time_to_first_token, ctx.model).observe(out.first_token_at - ctx.started)
            if out.last_token_at is not None and completion > 1:
                metrics.child(metrics.time_per_output_token, ctx.model).observe(
                    (out.last_token_at - out.first_token_at) / (completion - 1)
                )
        if prompt:
            metrics.child(metrics.tokens, ctx.model, ctx.team, "prompt").inc(prompt)
        if completion:
            metrics.child(metrics.tokens, ctx.model, ctx.team, "completion").inc(completion)
        ctx.prompt_tokens, ctx.completion_tokens, ctx.outcome = prompt, completion, ending.value
        if out.first_token_at is not None:
            ctx.ttft_ms = (out.first_token_at - ctx.started) * 1000
        ctx.finish_reason = (out.finish_reason or "")[:64]  # the worker's word: bounded
        # Every attempt that failed is in attempt_failures; the one that answered (if any) is not.
        ctx.attempts = max(ctx.attempts, len(out.attempt_failures))
        price = self.price
        self.meter.submit(
            UsageRecord(
                request_id=ctx.request_id,
                team=ctx.team,
                key_id=ctx.key_id,
                model=ctx.model,
                prompt_tokens=prompt,
                completion_tokens=completion,
                error=ending is Ending.ERROR,
                disconnected=ending is Ending.DISCONNECTED,
                day=UsageRecord.today(),
                settlements=tuple(self.admission.settlements(prompt, completion, charged=price)),
                api=ctx.api,
                cost_nano=price.nano_cost(prompt, completion) if price is not None else 0,
                price_version=price.version if price is not None else UNPRICED,
                served_by=ctx.served_by,
            )
        )
        if self.share is None:
            return
        # After the usage record: its write to Redis (which frees the request's limits) goes
        # first; the fair-share correction is batched behind it.
        timed_out = out.error_reason == Failure.ANSWER_TIMEOUT or any(
            reason == Failure.TIMEOUT for _, reason in out.attempt_failures
        )
        if out.failed and timed_out and not (prompt or completion):
            self.share.keep()  # it held the engine to the deadline: billed nothing, not free
        else:
            self.share.settle(prompt, completion)
