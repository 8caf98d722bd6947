"""The OpenAI-compatible API. The handler only sequences the steps:

    authenticate -> admit (limits) -> route -> relay (stream or whole) -> meter

Each step lives in its own module and raises a GatewayError to stop the request; the app maps
that to a status and envelope in one place.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import orjson
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway import redis_keys
from gateway.calls import Call, CallKind, parse_call, read_body
from gateway.context import RequestContext
from gateway.errors import ErrorCode, GatewayError
from gateway.keystore import KeyRecord
from gateway.metering import UsageRecord
from gateway.ratelimit import Limit
from gateway.relay import STREAM_HEADERS, ModelRewrite, RelayOutcome, StreamRelay, read_whole
from gateway.routing.policy import RouteRequest
from gateway.routing.pool import Pool
from gateway.services import Services

_MAX_ANSWER_BYTES = 64 * 1024 * 1024
_FORWARDED_WORKER_HEADERS = ("retry-after",)
# Never sent on to a worker: the client's credentials, and headers that describe the client's own
# connection or body (the gateway's request to the worker has its own).
_NOT_FORWARDED = frozenset(
    {
        b"authorization",
        b"proxy-authorization",
        b"cookie",
        b"host",
        b"content-length",
        b"content-type",
        b"transfer-encoding",
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"upgrade",
        b"expect",
        b"accept-encoding",
        b"x-request-id",
    }
)


def worker_headers(request: Request, request_id: str) -> dict[str, str]:
    """The client's headers minus credentials and hop-by-hop ones: tracing headers and the
    like reach the worker unchanged."""
    headers = {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in request.scope["headers"]
        if name not in _NOT_FORWARDED
    }
    headers["content-type"] = "application/json"
    headers["x-request-id"] = request_id
    return headers


def services_of(scope: Scope) -> Services:
    services: Services = scope["state"]["services"]
    return services


def key_limits(key: KeyRecord) -> list[Limit]:
    if key.rpm is None:
        return []
    return [
        Limit(
            redis_key=redis_keys.rate_limit(key.team, f"key:{key.id}:rpm"),
            rate=key.rpm,
            period_s=60.0,
            description=f"key {key.id} requests per minute",
        )
    ]


class ProxyEndpoint:
    """POST /v1/chat/completions, /v1/completions, /v1/embeddings."""

    def __init__(self, kind: CallKind) -> None:
        self.kind = kind

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await self.handle(request, services_of(scope), RequestContext.of(request))
        await response(scope, receive, send)

    async def handle(self, request: Request, services: Services, ctx: RequestContext) -> Any:
        key = await services.auth.authenticate(request.headers)
        ctx.team, ctx.key_id = key.team, key.id
        call = parse_call(await read_body(request, services.settings.max_body_bytes), self.kind)
        pool = services.router.resolve(call.model)
        if pool is None:
            raise GatewayError(
                ErrorCode.MODEL_NOT_FOUND,
                f"The model '{call.model}' does not exist.",
                param="model",
            )
        ctx.model = pool.model.name
        if not key.may_use(pool.model.name):
            raise GatewayError(
                ErrorCode.MODEL_NOT_ALLOWED,
                f"This API key may not use the model '{call.model}'.",
                param="model",
            )
        admission = await services.limiter.admit(key_limits(key))
        if not admission.allowed:
            services.metrics.rate_limited.labels(ctx.model, key.team).inc()
            raise admission.error()
        headers = worker_headers(request, ctx.request_id)
        return await _relay(services, ctx, pool, call, headers, admission.request_headers())


async def _relay(
    services: Services,
    ctx: RequestContext,
    pool: Pool,
    call: Call,
    headers: dict[str, str],
    limit_headers: dict[str, str],
) -> Any:
    model = pool.model
    loop = asyncio.get_running_loop()
    timeouts = model.timeouts
    head_deadline = loop.time() + (timeouts.first_token if call.stream else timeouts.total)
    rewrite = ModelRewrite(model.upstream_model, call.model) if model.upstream_model else None
    if rewrite is None and call.model != model.name:
        rewrite = ModelRewrite(model.name, call.model)  # an alias: answer with the name asked for
    inflight = services.metrics.inflight.labels(model.name)
    inflight.inc()
    try:
        upstream = await services.upstream.open(
            pool,
            call.kind.path,
            call.upstream_body(model),
            headers,
            RouteRequest(model=model.name, user=call.user),
            head_deadline=head_deadline,
        )
    except GatewayError:
        inflight.dec()
        await _meter(services, ctx, None, prompt=0, completion=0, error=True)
        raise
    response = upstream.response
    if call.stream and response.status == 200 and response.content_type == "text/event-stream":
        stream_headers = [
            *STREAM_HEADERS,
            *((k.encode(), v.encode()) for k, v in limit_headers.items()),
        ]
        return StreamRelay(
            upstream,
            headers=stream_headers,
            client_wants_usage=call.wants_usage,
            rewrite=rewrite,
            first_token_deadline=head_deadline,
            idle_timeout_s=timeouts.idle,
            on_done=functools.partial(_stream_done, services, ctx, call),
        )
    try:
        answer = await read_whole(
            upstream,
            deadline=loop.time() + timeouts.total,
            max_bytes=_MAX_ANSWER_BYTES,
            rewrite=rewrite,
        )
    except GatewayError as err:
        services.metrics.upstream_errors.labels(model.name, err.code.wire_code).inc()
        await _meter(services, ctx, None, prompt=0, completion=0, error=True)
        raise
    finally:
        upstream.release()
        inflight.dec()
    status = answer.status
    failure = _worker_failure(ctx.model, status, answer.body)
    if failure is not None:
        services.metrics.upstream_errors.labels(ctx.model, f"status_{status}").inc()
        await _meter(services, ctx, None, prompt=0, completion=0, error=True)
        raise failure
    headers = dict(limit_headers)
    for name in _FORWARDED_WORKER_HEADERS:
        if name in upstream.response.headers:
            headers[name] = upstream.response.headers[name]
    prompt, completion = _usage_tokens(answer.usage)
    record = _usage_record(ctx, prompt, completion, error=status != 200, disconnected=False)
    _account(services, ctx, record)
    return Response(
        answer.body,
        status_code=status,
        headers=headers,
        media_type=answer.content_type,
        background=BackgroundTask(services.meter.try_record, record),
    )


def _worker_failure(model: str, status: int, body: bytes) -> GatewayError | None:
    """A worker's 4xx with an OpenAI error body is the client's answer; anything else is ours."""
    if status >= 500:
        code = ErrorCode.UPSTREAM_TIMEOUT if status == 504 else ErrorCode.UPSTREAM_ERROR
        return GatewayError(code, f"The worker for model '{model}' failed (HTTP {status}).")
    if status != 200 and not _is_error_envelope(body):
        return GatewayError(
            ErrorCode.UPSTREAM_ERROR,
            f"The worker for model '{model}' answered HTTP {status} without an error body.",
        )
    return None


def _is_error_envelope(body: bytes) -> bool:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(parsed, dict) and isinstance(parsed.get("error"), dict | str)


def _usage_tokens(usage: dict[str, Any] | None) -> tuple[int, int]:
    if not usage:
        return 0, 0
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    return (
        prompt if isinstance(prompt, int) else 0,
        completion if isinstance(completion, int) else 0,
    )


async def _stream_done(services: Services, ctx: RequestContext, call: Call, outcome: RelayOutcome) -> None:
    services.metrics.inflight.labels(ctx.model).dec()
    if outcome.usage is not None:
        prompt, completion = _usage_tokens(outcome.usage)
    else:
        # The stream ended before the worker's usage report: count what reached the client.
        prompt, completion = call.estimated_prompt_tokens(), outcome.tokens_relayed
    if outcome.error_reason is not None:
        services.metrics.upstream_errors.labels(ctx.model, outcome.error_reason).inc()
    if outcome.first_token_at is not None:
        services.metrics.time_to_first_token.labels(ctx.model).observe(outcome.first_token_at - ctx.started)
        if outcome.last_token_at is not None and completion > 1:
            services.metrics.time_per_output_token.labels(ctx.model).observe(
                (outcome.last_token_at - outcome.first_token_at) / (completion - 1)
            )
    await _meter(
        services,
        ctx,
        outcome,
        prompt=prompt,
        completion=completion,
        error=outcome.error_reason is not None,
    )


async def _meter(
    services: Services,
    ctx: RequestContext,
    outcome: RelayOutcome | None,
    *,
    prompt: int,
    completion: int,
    error: bool,
) -> None:
    disconnected = outcome is not None and outcome.disconnected
    record = _usage_record(ctx, prompt, completion, error=error, disconnected=disconnected)
    _account(services, ctx, record)
    await services.meter.try_record(record)


def _usage_record(
    ctx: RequestContext, prompt: int, completion: int, *, error: bool, disconnected: bool
) -> UsageRecord:
    """Usage is keyed by the resolved model name, never by the alias the client sent."""
    return UsageRecord(
        request_id=ctx.request_id,
        team=ctx.team,
        key_id=ctx.key_id,
        model=ctx.model,
        prompt_tokens=prompt,
        completion_tokens=completion,
        error=error,
        disconnected=disconnected,
        day=UsageRecord.today(),
    )


def _account(services: Services, ctx: RequestContext, record: UsageRecord) -> None:
    """The Prometheus side of metering, from the very record written to Redis."""
    ctx.prompt_tokens, ctx.completion_tokens = record.prompt_tokens, record.completion_tokens
    ctx.outcome = "disconnected" if record.disconnected else ("error" if record.error else "ok")
    if record.prompt_tokens:
        services.metrics.tokens.labels(record.model, record.team, "prompt").inc(record.prompt_tokens)
    if record.completion_tokens:
        services.metrics.tokens.labels(record.model, record.team, "completion").inc(record.completion_tokens)


async def list_models(request: Request) -> Response:
    services = services_of(request.scope)
    key = await services.auth.authenticate(request.headers)
    RequestContext.of(request).team = key.team
    data: list[dict[str, object]] = []
    for pool in services.router.pools():
        model = pool.model
        if not key.may_use(model.name):
            continue
        for name in (model.name, *model.aliases):
            data.append(
                {
                    "id": name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "sluicegate",
                    "root": model.name,
                }
            )
    return Response(orjson.dumps({"object": "list", "data": data}), media_type="application/json")
