"""The API routes: each client API is the one pipeline with its own dialect; `/v1/models` lists
what the caller's key may use, `/v1/models/{model}` shows one of them."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.errors import ErrorCode, GatewayError
from gateway.keys.auth import Authenticator
from gateway.keys.store import KeyRecord
from gateway.proxy.context import RequestContext
from gateway.proxy.dialects.base import Dialect
from gateway.proxy.pipeline import Pipeline
from gateway.proxy.worker_errors import sanitised
from gateway.routing.router import Router

# The `api` of the model listings in metrics and the access log: a constant, like a dialect's name.
MODELS_API = "models"


class ProxyEndpoint:
    """An ASGI endpoint that serves one client API through the pipeline built in the lifespan."""

    def __init__(self, dialect: Dialect[Any]) -> None:
        self.dialect = dialect

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pipeline: Pipeline = scope["state"]["pipeline"]
        await pipeline.serve(self.dialect, scope, receive, send)


async def _caller(request: Request) -> tuple[KeyRecord, Router]:
    ctx = RequestContext.of(request.scope)
    ctx.api = MODELS_API
    auth: Authenticator = request.scope["state"]["auth"]
    key = (await auth.authenticate(request.headers)).key
    ctx.team, ctx.key_id = key.team, key.id
    return key, request.scope["state"]["router"]


def _entry(name: str, model: str) -> dict[str, object]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "sluicegate", "root": model}


def _json(data: object) -> Response:
    return Response(orjson.dumps(data), media_type="application/json")


async def list_models(request: Request) -> Response:
    key, router = await _caller(request)
    data: list[dict[str, object]] = []
    for route in router.models():
        model = route.model
        if key.may_use(model.name):
            data.extend(_entry(name, model.name) for name in (model.name, *model.aliases))
    return _json({"object": "list", "data": data})


async def retrieve_model(request: Request) -> Response:
    """One model or alias, as its entry in the listing. A model the key may not use is a 404,
    like one that does not exist: a key learns nothing about the models of other teams."""
    key, router = await _caller(request)
    name: str = request.path_params["model"]
    route = router.resolve(name)
    if route is None or not key.may_use(route.model.name):
        raise GatewayError(
            ErrorCode.MODEL_NOT_FOUND,
            f"The model '{sanitised(name)}' does not exist or this key may not use it.",
            param="model",
        )
    return _json(_entry(name, route.model.name))
