"""The Responses API's main route, `POST /v1/responses` through the pipeline (the routes that
reach a stored response are its side routes: gateway.apis.responses.stored)."""

from __future__ import annotations

from starlette.routing import BaseRoute, Route

from gateway.apis.endpoint import ProxyEndpoint
from gateway.apis.responses.dialect import RESPONSES


def routes() -> list[BaseRoute]:
    return [Route("/v1/responses", ProxyEndpoint(RESPONSES), methods=["POST"])]
