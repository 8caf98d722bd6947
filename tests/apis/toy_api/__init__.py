"""A fifth client API, from the test folder: one package and one line (`apis=(*APIS, toy.API)` for
`create_app`), nothing in gateway/ named. Its main route `POST /toy/v1/generate` goes through the
one pipeline (translated to the chat contract, `TranslatedCall`); its side route
`GET /toy/v1/models` lists the key's models; its bodies' lists, hosted tools, paths and landing
entry are declared here and nowhere else (tests/apis/test_toy_api.py proves each takes effect)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from gateway.apis.endpoint import ProxyEndpoint
from gateway.apis.spec import ClientApi, SideRoute
from gateway.edge.openapi_parts import OpenApiPart
from gateway.http.context import RequestContext
from gateway.keys.credentials import Credential
from gateway.state import app_state
from tests.apis.toy_api.dialect import HOSTED_TOOLS, LISTS, NAME, ToyDialect, error_response

MODELS_API = "toy.models"


async def _models(request: Request, ctx: RequestContext) -> Response:
    gate = app_state(request.scope)["gate"]
    key = (await gate.caller(request, ctx)).key
    return JSONResponse({"models": [route.model.name for route in gate.models(key)]})


def _routes() -> list[BaseRoute]:
    return [Route("/toy/v1/generate", ProxyEndpoint(ToyDialect()), methods=["POST"])]


def _paths() -> dict[str, object]:
    return {"/toy/v1/generate": {"post": {"responses": {"200": {"description": "A toy answer."}}}}}


API = ClientApi(
    name=NAME,
    operations={NAME: "chat"},
    credentials=(Credential(header="x-toy-key"),),
    routes=_routes,
    openapi=OpenApiPart(paths=_paths),
    paths=("/toy/",),
    side_routes=(SideRoute("/toy/v1/models", ("GET",), MODELS_API, _models),),
    envelope=error_response,
    body_lists=LISTS,
    hosted_tools=HOSTED_TOOLS,
    home={"toy": "/toy/v1"},
)
