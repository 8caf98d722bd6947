"""The route and relay steps: send the call to a worker of its model's pools (or of a fallback
model) and hand the client either a live stream or the whole answer. Leaving before the worker
answers, or while waiting in a saturated pool's queue, cancels the worker call or the wait.

The body a worker gets names the wire model of the pool actually used (the pool's
`upstream_model`, else the model's, else its name). The answer's `model` field is rewritten to
the name the client asked for, or, when a fallback model answered, to that model's name; the
`x-sluicegate-model` header always names the model that answered."""

from __future__ import annotations

import asyncio
import functools

from starlette.responses import Response
from starlette.types import ASGIApp, Receive

from gateway import accounting
from gateway.calls import Call
from gateway.context import RequestContext
from gateway.disconnect import unless_client_leaves
from gateway.errors import GatewayError
from gateway.ratelimit import Admission
from gateway.relay import (
    STREAM_HEADERS,
    ModelRewrite,
    RelayOutcome,
    StreamRelay,
    WholeAnswer,
    read_whole,
)
from gateway.routing.policy import RouteRequest
from gateway.routing.pool import Pool
from gateway.routing.router import ModelRoute
from gateway.services import Services
from gateway.upstream import UpstreamResponse

_MAX_ANSWER_BYTES = 64 * 1024 * 1024
# nginx's code for "client closed the request": only ever seen in our own logs and metrics.
CLIENT_CLOSED = 499
# Names the model that answered: the one asked for, or the fallback that stood in for it.
MODEL_HEADER = "x-sluicegate-model"
SESSION_HEADER = "x-session-id"


def _answer_name(requested: ModelRoute, pool: Pool, call: Call) -> str:
    """The model name the client sees in the answer: the name it asked for (an alias stays an
    alias), or, when a fallback model answered, that model's name, so a client can tell."""
    return call.model if pool.model is requested.model else pool.model.name


def _rewrite_for(pool: Pool, answer_name: str) -> ModelRewrite | None:
    return None if pool.wire_model == answer_name else ModelRewrite(pool.wire_model, answer_name)


async def _fetch(
    services: Services,
    requested: ModelRoute,
    call: Call,
    headers: dict[str, str],
    route: RouteRequest,
    head_deadline: float,
) -> tuple[UpstreamResponse | WholeAnswer, Pool, ModelRewrite | None]:
    upstream = await services.upstream.open(
        services.router.plan(requested),
        call.kind.path,
        lambda pool: call.upstream_body(pool.wire_model),
        headers,
        route,
        head_deadline=head_deadline,
        stream=call.stream,
    )
    pool = upstream.pool
    rewrite = _rewrite_for(pool, _answer_name(requested, pool, call))
    response = upstream.response
    if call.stream and response.status == 200 and response.content_type == "text/event-stream":
        return upstream, pool, rewrite  # the stream relay releases it
    # A stream request the worker refused answers with a small JSON error body.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + pool.model.timeouts.idle if call.stream else head_deadline
    try:
        answer = await read_whole(upstream, deadline=deadline, max_bytes=_MAX_ANSWER_BYTES, rewrite=rewrite)
    except GatewayError as err:
        services.metrics.upstream_errors.labels(pool.model.name, err.code.wire_code).inc()
        raise
    finally:
        upstream.release()
    return answer, pool, rewrite


async def relay(
    services: Services,
    ctx: RequestContext,
    requested: ModelRoute,
    call: Call,
    headers: dict[str, str],
    admission: Admission,
    receive: Receive,
    *,
    share_weight: int = 1,
) -> ASGIApp:
    """Limits and metering stay with the model the client asked for (admission already
    happened); a fallback model only changes who answers, named in `x-sluicegate-model`."""
    model = requested.model
    timeouts = model.timeouts
    head_deadline = asyncio.get_running_loop().time() + (
        timeouts.first_token if call.stream else timeouts.total
    )
    route = RouteRequest(
        model=model.name,
        user=call.user,
        session_id=headers.get(SESSION_HEADER),
        team=ctx.team or "",
        share_weight=share_weight,
    )
    inflight = services.metrics.inflight.labels(model.name)
    inflight.inc()
    try:
        # The queue wait for a saturated pool is inside: a client that leaves stops waiting.
        answered, fetched = await unless_client_leaves(
            _fetch(services, requested, call, headers, route, head_deadline), receive
        )
    except GatewayError:
        inflight.dec()
        accounting.meter(services, ctx, admission, prompt=0, completion=0, error=True)
        raise
    if fetched is None or not answered:
        inflight.dec()
        accounting.meter(
            services, ctx, admission, prompt=call.estimated_prompt_tokens(), completion=0, disconnected=True
        )
        return Response(status_code=CLIENT_CLOSED)
    answer, pool, rewrite = fetched
    answered_by = {MODEL_HEADER: pool.model.name}
    if isinstance(answer, UpstreamResponse):
        return StreamRelay(
            answer,
            headers=[
                *STREAM_HEADERS,
                *((k.encode(), v.encode()) for k, v in {**admission.headers(), **answered_by}.items()),
            ],
            client_wants_usage=call.wants_usage,
            rewrite=rewrite,
            first_token_deadline=head_deadline,
            idle_timeout_s=timeouts.idle,
            on_done=functools.partial(_stream_done, services, ctx, admission, call.estimated_prompt_tokens()),
        )
    inflight.dec()
    return _whole_answer(services, ctx, admission, answer, answered_by)


async def _stream_done(
    services: Services,
    ctx: RequestContext,
    admission: Admission,
    estimated_prompt: int,
    outcome: RelayOutcome,
) -> None:
    services.metrics.inflight.labels(ctx.model).dec()
    accounting.meter_stream(services, ctx, admission, estimated_prompt, outcome)


def _whole_answer(
    services: Services,
    ctx: RequestContext,
    admission: Admission,
    answer: WholeAnswer,
    answered_by: dict[str, str],
) -> Response:
    failure = answer.failure(ctx.model)
    if failure is not None:
        services.metrics.upstream_errors.labels(ctx.model, f"status_{answer.status}").inc()
        accounting.meter(services, ctx, admission, prompt=0, completion=0, error=True)
        raise failure
    prompt, completion = accounting.usage_tokens(answer.usage)
    accounting.meter(
        services, ctx, admission, prompt=prompt, completion=completion, error=answer.status != 200
    )
    return Response(
        answer.body,
        status_code=answer.status,
        headers={**admission.headers(), **answer.forwarded_headers, **answered_by},
        media_type=answer.content_type,
    )
