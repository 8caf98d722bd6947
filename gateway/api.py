"""The OpenAI-compatible API. The handler only sequences the steps:

    authenticate -> admit (limits) -> route -> relay (stream or whole) -> meter

Each step lives in its own module and raises a GatewayError to stop the request; the app maps
that to a status and envelope in one place.
"""

from __future__ import annotations

import datetime as dt

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway import forward, ratelimit
from gateway.calls import CallKind, parse_call, read_body
from gateway.context import RequestContext
from gateway.errors import ErrorCode, GatewayError
from gateway.services import Services

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


class ProxyEndpoint:
    """POST /v1/chat/completions, /v1/completions, /v1/embeddings."""

    def __init__(self, kind: CallKind) -> None:
        self.kind = kind

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await self.handle(request, services_of(scope), RequestContext.of(request))
        await response(scope, receive, send)

    async def handle(self, request: Request, services: Services, ctx: RequestContext) -> ASGIApp:
        principal = await services.auth.authenticate(request.headers)
        key = principal.key
        ctx.team, ctx.key_id = key.team, key.id
        call = parse_call(await read_body(request, services.settings.max_body_bytes), self.kind)
        requested = services.router.resolve(call.model)
        if requested is None:
            raise GatewayError(
                ErrorCode.MODEL_NOT_FOUND,
                f"The model '{call.model}' does not exist.",
                param="model",
            )
        model = requested.model
        ctx.model = model.name
        if not key.may_use(model.name):
            raise GatewayError(
                ErrorCode.MODEL_NOT_ALLOWED,
                f"This API key may not use the model '{call.model}'.",
                param="model",
            )
        limits = ratelimit.plan(
            key.team, principal.team_limits, key.id, key.limits, model.name, dt.datetime.now(dt.UTC)
        )
        reservation = call.reservation(services.settings.default_max_tokens)
        admission = await services.limiter.admit(limits, ctx.request_id, reservation)
        if not admission.allowed:
            services.metrics.rate_limited.labels(ctx.model, key.team).inc()
            raise admission.error()
        return await forward.relay(
            services,
            ctx,
            requested,
            call,
            worker_headers(request, ctx.request_id),
            admission,
            request.receive,
            share_weight=principal.team_limits.share_weight,
        )


async def list_models(request: Request) -> Response:
    services = services_of(request.scope)
    key = (await services.auth.authenticate(request.headers)).key
    RequestContext.of(request).team = key.team
    data: list[dict[str, object]] = []
    for route in services.router.models():
        model = route.model
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
