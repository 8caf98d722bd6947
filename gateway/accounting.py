"""The meter step: one usage record per request, written to Redis and counted in Prometheus from
the very same numbers, so the two always agree."""

from __future__ import annotations

from typing import Any

from gateway.context import RequestContext
from gateway.metering import UsageRecord
from gateway.ratelimit import Admission
from gateway.relay import RelayOutcome
from gateway.services import Services


def usage_tokens(usage: dict[str, Any] | None) -> tuple[int, int]:
    if not usage:
        return 0, 0
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    return (
        prompt if isinstance(prompt, int) else 0,
        completion if isinstance(completion, int) else 0,
    )


def settle(
    services: Services,
    ctx: RequestContext,
    admission: Admission,
    *,
    prompt: int,
    completion: int,
    error: bool = False,
    disconnected: bool = False,
) -> UsageRecord:
    """Counts the request in Prometheus and returns the record for Redis.
    Usage is keyed by the resolved model name, never by the alias the client sent."""
    record = UsageRecord(
        request_id=ctx.request_id,
        team=ctx.team,
        key_id=ctx.key_id,
        model=ctx.model,
        prompt_tokens=prompt,
        completion_tokens=completion,
        error=error,
        disconnected=disconnected,
        day=UsageRecord.today(),
        settlements=tuple(admission.settlements(prompt, completion)),
    )
    ctx.prompt_tokens, ctx.completion_tokens = prompt, completion
    ctx.outcome = "disconnected" if disconnected else ("error" if error else "ok")
    if prompt:
        services.metrics.tokens.labels(ctx.model, ctx.team, "prompt").inc(prompt)
    if completion:
        services.metrics.tokens.labels(ctx.model, ctx.team, "completion").inc(completion)
    return record


def meter(
    services: Services,
    ctx: RequestContext,
    admission: Admission,
    *,
    prompt: int,
    completion: int,
    error: bool = False,
    disconnected: bool = False,
) -> None:
    services.meter.submit(
        settle(
            services,
            ctx,
            admission,
            prompt=prompt,
            completion=completion,
            error=error,
            disconnected=disconnected,
        )
    )


def meter_stream(
    services: Services,
    ctx: RequestContext,
    admission: Admission,
    estimated_prompt: int,
    outcome: RelayOutcome,
) -> None:
    metrics = services.metrics
    if outcome.usage is not None:
        prompt, completion = usage_tokens(outcome.usage)
    else:
        # The stream ended before the worker's usage report: count what reached the client.
        prompt, completion = estimated_prompt, outcome.tokens_relayed
    if outcome.error_reason is not None:
        metrics.upstream_errors.labels(ctx.model, outcome.error_reason).inc()
    if outcome.first_token_at is not None:
        metrics.time_to_first_token.labels(ctx.model).observe(outcome.first_token_at - ctx.started)
        if outcome.last_token_at is not None and completion > 1:
            metrics.time_per_output_token.labels(ctx.model).observe(
                (outcome.last_token_at - outcome.first_token_at) / (completion - 1)
            )
    meter(
        services,
        ctx,
        admission,
        prompt=prompt,
        completion=completion,
        error=outcome.error_reason is not None,
        disconnected=outcome.disconnected,
    )
