"""`GET /v1/models` lists the models (and aliases) the caller's key may use; `GET
/v1/models/{model}` shows one of them. Both pass the one gate (gateway.proxy.gate). Side routes
(gateway.apis.spec.SideRoute): an error is told in OpenAI's envelope, once, by the endpoint."""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.apis.spec import SideRoute
from gateway.http.context import RequestContext
from gateway.keys.store import KeyRecord
from gateway.proxy.gate import Gate
from gateway.state import app_state

# The `api` of the model listings in metrics and the access log: a constant, like a dialect's name.
MODELS_API = "models"


async def _caller(request: Request, ctx: RequestContext) -> tuple[KeyRecord, Gate]:
    gate = app_state(request.scope)["gate"]
    return (await gate.caller(request, ctx)).key, gate


def _entry(name: str, model: str) -> dict[str, object]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "sluicegate", "root": model}


def _json(data: object) -> Response:
    return Response(orjson.dumps(data), media_type="application/json")


async def _list_models(request: Request, ctx: RequestContext) -> Response:
    key, gate = await _caller(request, ctx)
    data: list[dict[str, object]] = []
    for route in gate.models(key):
        model = route.model
        data.extend(_entry(name, model.name) for name in (model.name, *model.aliases))
    return _json({"object": "list", "data": data})


async def _retrieve_model(request: Request, ctx: RequestContext) -> Response:
    """One model or alias, as its entry in the listing. A model the key may not use is a 404,
    like one that does not exist: a key learns nothing about the models of other teams."""
    key, gate = await _caller(request, ctx)
    name: str = request.path_params["model"]
    return _json(_entry(name, gate.visible(key, name).model.name))


# `{model:path}`: a model name may hold a `/` (`meta-llama/Llama-3-8B`).
SIDE_ROUTES = (
    SideRoute("/v1/models", ("GET",), MODELS_API, _list_models),
    SideRoute("/v1/models/{model:path}", ("GET",), MODELS_API, _retrieve_model),
)
