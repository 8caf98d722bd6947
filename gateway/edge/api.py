"""The API routes: each client API is the one pipeline with its own dialect; `/v1/models` lists
what the caller's key may use."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.keys.auth import Authenticator
from gateway.proxy.context import RequestContext
from gateway.proxy.dialects.base import Dialect
from gateway.proxy.pipeline import Pipeline
from gateway.routing.router import Router


class ProxyEndpoint:
    """An ASGI endpoint that serves one client API through the pipeline built in the lifespan."""

    def __init__(self, dialect: Dialect[Any]) -> None:
        self.dialect = dialect

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pipeline: Pipeline = scope["state"]["pipeline"]
        await pipeline.serve(self.dialect, scope, receive, send)


async def list_models(request: Request) -> Response:
    auth: Authenticator = request.scope["state"]["auth"]
    router: Router = request.scope["state"]["router"]
    key = (await auth.authenticate(request.headers)).key
    RequestContext.of(request.scope).team = key.team
    data: list[dict[str, object]] = []
    for route in router.models():
        model = route.model
        if not key.may_use(model.name):
            continue
        for name in (model.name, *model.aliases):
            data.append(
                {"id": name, "object": "model", "created": 0, "owned_by": "sluicegate", "root": model.name}
            )
    return Response(orjson.dumps({"object": "list", "data": data}), media_type="application/json")
