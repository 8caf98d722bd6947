"""`GET /`: what a newcomer who opens the gateway's address in a browser or with curl sees, instead
of a 404: where the client APIs and the console are. With an admin port (gateway/edge/planes.py)
each listener names what it serves, and the client listener does not point at the admin one. The
client APIs' entries are theirs (gateway.apis: each one's `home`), handed down by the app."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway import __version__
from gateway.edge.planes import on_admin_listener


def home_route(admin_port: int | None, client_apis: Mapping[str, str]) -> Route:
    """`client_apis`: name -> path, each client API's entries, in the order of the APIs."""
    entries = {**client_apis, "openapi": "/openapi.json", "key_info": "/v1/key/info"}

    async def home(request: Request) -> Response:
        body: dict[str, object] = {"name": "sluicegate", "version": __version__}
        admin_here = admin_port is None or on_admin_listener(request.scope, admin_port)
        client_here = admin_port is None or not admin_here
        if client_here:
            body["client_apis"] = entries
        if admin_here:
            body["console"] = "/admin/ui/"
            body["admin_api"] = "/admin/v1"
            body["metrics"] = "/metrics"
        return JSONResponse(body)

    return Route("/", home, methods=["GET"])
