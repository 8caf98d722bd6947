"""The route and relay steps: send the call to a worker of its pool and hand the client either a
live stream or the whole answer. Leaving before the worker answers cancels the worker call."""

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
from gateway.services import Services
from gateway.upstream import UpstreamResponse

_MAX_ANSWER_BYTES = 64 * 1024 * 1024
# nginx's code for "client closed the request": only ever seen in our own logs and metrics.
CLIENT_CLOSED = 499


def _rewrite_for(pool: Pool, call: Call) -> ModelRewrite | None:
    model = pool.model
    if model.upstream_model:
        return ModelRewrite(model.upstream_model, call.model)
    if call.model != model.name:
        return ModelRewrite(model.name, call.model)  # an alias: answer with the name asked for
    return None


async def _fetch(
    services: Services,
    pool: Pool,
    call: Call,
    headers: dict[str, str],
    rewrite: ModelRewrite | None,
    head_deadline: float,
) -> UpstreamResponse | WholeAnswer:
    upstream = await services.upstream.open(
        pool,
        call.kind.path,
        call.upstream_body(pool.model),
        headers,
        RouteRequest(model=pool.model.name, user=call.user),
        head_deadline=head_deadline,
    )
    response = upstream.response
    if call.stream and response.status == 200 and response.content_type == "text/event-stream":
        return upstream  # the stream relay releases it
    # A stream request the worker refused answers with a small JSON error body.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + pool.model.timeouts.idle if call.stream else head_deadline
    try:
        return await read_whole(upstream, deadline=deadline, max_bytes=_MAX_ANSWER_BYTES, rewrite=rewrite)
    except GatewayError as err:
        services.metrics.upstream_errors.labels(pool.model.name, err.code.wire_code).inc()
        raise
    finally:
        upstream.release()


async def relay(
    services: Services,
    ctx: RequestContext,
    pool: Pool,
    call: Call,
    headers: dict[str, str],
    admission: Admission,
    receive: Receive,
) -> ASGIApp:
    model = pool.model
    timeouts = model.timeouts
    head_deadline = asyncio.get_running_loop().time() + (
        timeouts.first_token if call.stream else timeouts.total
    )
    rewrite = _rewrite_for(pool, call)
    inflight = services.metrics.inflight.labels(model.name)
    inflight.inc()
    try:
        answered, fetched = await unless_client_leaves(
            _fetch(services, pool, call, headers, rewrite, head_deadline), receive
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
    if isinstance(fetched, UpstreamResponse):
        return StreamRelay(
            fetched,
            headers=[*STREAM_HEADERS, *((k.encode(), v.encode()) for k, v in admission.headers().items())],
            client_wants_usage=call.wants_usage,
            rewrite=rewrite,
            first_token_deadline=head_deadline,
            idle_timeout_s=timeouts.idle,
            on_done=functools.partial(_stream_done, services, ctx, admission, call.estimated_prompt_tokens()),
        )
    inflight.dec()
    return _whole_answer(services, ctx, admission, fetched)


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
    services: Services, ctx: RequestContext, admission: Admission, answer: WholeAnswer
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
        headers={**admission.headers(), **answer.forwarded_headers},
        media_type=answer.content_type,
    )
