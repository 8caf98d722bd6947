"""The Responses API's routes: `POST /v1/responses` through the pipeline, then the routes that
reach a stored response (gateway.apis.responses.stored)."""

from __future__ import annotations

from starlette.routing import BaseRoute, Route

from gateway.apis.endpoint import ProxyEndpoint
from gateway.apis.responses.dialect import RESPONSES
from gateway.apis.responses.stored import stored_routes


def routes() -> list[BaseRoute]:
    return [Route("/v1/responses", ProxyEndpoint(RESPONSES), methods=["POST"]), *stored_routes()]
