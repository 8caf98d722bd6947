"""A path the gateway does not serve (404), or a method its path does not take (405), answered
in the envelope of the API family the request looks like, so the client's SDK can read it.

Anthropic's SDK reads `{"type": "error", "error": {"type", "message"}}`; everything else gets the
OpenAI envelope of gateway.errors. A request looks like Anthropic's when its path is under
`/v1/messages` or it carries `anthropic-version` (which every Anthropic SDK sends). The 404 names
the routes the gateway serves, read from the app's own routes at the time of the request: a route
added to the app is named without anyone keeping a list.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.errors import ErrorCode, GatewayError
from gateway.proxy.worker_errors import sanitised

ANTHROPIC_PREFIX = "/v1/messages"
# The families a path can belong to: its routes are the ones a 404 names.
_FAMILIES = ("/v1/", "/admin/")
_SHOWN_PATH_CHARS = 100  # the client's path is echoed, cut short: the routes matter more
_CONVERTOR = re.compile(r"\{(\w+):\w+\}")  # `{model:path}` is `{model}` to a client


def looks_anthropic(request: Request) -> bool:
    path = request.url.path
    return (
        path == ANTHROPIC_PREFIX
        or path.startswith(ANTHROPIC_PREFIX + "/")
        or "anthropic-version" in request.headers
    )


def served(routes: Iterable[BaseRoute], path: str) -> list[str]:
    """`METHOD /path` of every route in the family of `path` (every route, outside the families)."""
    family = next((prefix for prefix in _FAMILIES if path.startswith(prefix)), "/")
    out: list[str] = []
    for route in routes:
        if isinstance(route, Route) and route.path.startswith(family):
            shown = _CONVERTOR.sub(r"{\1}", route.path)
            out.extend(f"{method} {shown}" for method in sorted((route.methods or set()) - {"HEAD"}))
    return out


def answer(request: Request, status: int, headers: Mapping[str, str] | None) -> Response:
    """The 404 or 405 for this request (`headers`: Starlette's, e.g. the 405's `Allow`)."""
    method, path = request.method, request.url.path
    shown = sanitised(path[:_SHOWN_PATH_CHARS])
    if status == 404:
        routes = ", ".join(served(request.app.routes, path))
        message = f"Unknown route: {method} {shown}. This gateway serves: {routes}."
        code = ErrorCode.NOT_FOUND
    else:
        allowed = next((v for k, v in (headers or {}).items() if k.lower() == "allow"), "")
        message = f"{method} is not allowed on {shown}; it takes: {allowed}."
        code = ErrorCode.METHOD_NOT_ALLOWED
    if looks_anthropic(request):
        return _anthropic(status, message, headers)
    return GatewayError(code, message).response(headers)


def _anthropic(status: int, message: str, headers: Mapping[str, str] | None) -> Response:
    kind = "not_found_error" if status == 404 else "invalid_request_error"
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return Response(
        orjson.dumps(body), status_code=status, headers=dict(headers or {}), media_type="application/json"
    )
