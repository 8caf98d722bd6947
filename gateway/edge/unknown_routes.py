"""A path the gateway does not serve (404), or a method its path does not take (405), answered
in the envelope of the API family the request looks like, so the client's SDK can read it.

Each client API that has an envelope of its own says how it recognises its requests (a
`RouteFamily`, declared in gateway.apis and handed down by the app): Anthropic's by a path under
`/v1/messages` or an `anthropic-version` header. The first family that claims a request answers
it; everything else gets the OpenAI envelope of gateway.errors. The 404 names the routes the
gateway serves, read from the app's own routes at the time of the request: a route added to the
app is named without anyone keeping a list.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route

from gateway.edge.planes import routes_here
from gateway.errors import ErrorCode, GatewayError
from gateway.proxy.worker_errors import sanitised

# The families a path can belong to: its routes are the ones a 404 names.
_FAMILIES = ("/v1/", "/admin/")
_SHOWN_PATH_CHARS = 100
# Past this a 404 names families, not routes: an error message stays short enough to read (and
# under the 1 KiB that tests/pipeline holds every message to).
_MAX_LISTED_CHARS = 700  # the client's path is echoed, cut short: the routes matter more
_CONVERTOR = re.compile(r"\{(\w+):\w+\}")  # `{model:path}` is `{model}` to a client


@dataclass(frozen=True, slots=True)
class RouteFamily:
    """One client API's unknown routes: `owns` says a request looks like the API's, `answer`
    renders (status, message, headers) in its envelope; a 404 under one of `prefixes` names the
    routes under that prefix."""

    owns: Callable[[Request], bool]
    answer: Callable[[int, str, Mapping[str, str] | None], Response]
    prefixes: tuple[str, ...] = ()


def served(routes: Iterable[BaseRoute], path: str, prefixes: Sequence[str] = _FAMILIES) -> list[str]:
    """`METHOD /path` of every route in the family of `path` (every route, outside the families)."""
    family = next((prefix for prefix in prefixes if path.startswith(prefix)), "/")
    out: list[str] = []
    for route in routes:
        if isinstance(route, Route) and route.path.startswith(family):
            shown = _CONVERTOR.sub(r"{\1}", route.path)
            out.extend(f"{method} {shown}" for method in sorted((route.methods or set()) - {"HEAD"}))
    return out


def _summary(routes: Iterable[BaseRoute], prefixes: Sequence[str]) -> list[str]:
    """Outside every family: each family by its prefix and route count (a full list would not
    fit an error message), then the routes of no family by name."""
    listed = served(routes, "/", ())
    out = []
    for prefix in dict.fromkeys(p.rstrip("/") for p in prefixes):
        count = sum(1 for r in listed if r.split(" ", 1)[1].startswith(prefix + "/"))
        if count:
            out.append(f"{prefix}/... ({count} routes)")
    rest = [
        r for r in listed if not any(r.split(" ", 1)[1].startswith(p.rstrip("/") + "/") for p in prefixes)
    ]
    return [*out, *rest, "GET /openapi.json names them all"] if out else rest


def answer(
    request: Request,
    status: int,
    headers: Mapping[str, str] | None,
    families: Sequence[RouteFamily] = (),
) -> Response:
    """The 404 or 405 for this request (`headers`: Starlette's, e.g. the 405's `Allow`)."""
    method, path = request.method, request.url.path
    shown = sanitised(path[:_SHOWN_PATH_CHARS])
    if status == 404:
        prefixes = (*_FAMILIES, *(prefix for family in families for prefix in family.prefixes))
        here = routes_here(request.app.routes, request.scope)
        # A listener that serves none of the family (the admin port: planes.py) names all it serves.
        named = served(here, path, prefixes) or served(here, path, ())
        routes = ", ".join(named if len(", ".join(named)) <= _MAX_LISTED_CHARS else _summary(here, prefixes))
        message = f"Unknown route: {method} {shown}. This gateway serves: {routes}."
        code = ErrorCode.NOT_FOUND
    else:
        allowed = _allowed(request) or next(
            (v for k, v in (headers or {}).items() if k.lower() == "allow"), ""
        )
        headers = {**{k: v for k, v in (headers or {}).items() if k.lower() != "allow"}, "allow": allowed}
        message = f"{method} is not allowed on {shown}; it takes: {allowed}."
        code = ErrorCode.METHOD_NOT_ALLOWED
    for family in families:
        if family.owns(request):
            return family.answer(status, message, headers)
    return GatewayError(code, message).response(headers)


def _allowed(request: Request) -> str:
    """Every method the path takes, over every route whose path matches: two APIs may serve one
    path with different methods (OpenAI's GET and Gemini's POST of /v1/models/{model}), and
    Starlette's own `Allow` names only the first route's."""
    methods: set[str] = set()
    for route in routes_here(request.app.routes, request.scope):
        if isinstance(route, Route) and route.methods and route.matches(request.scope)[0] is not Match.NONE:
            methods |= route.methods
    return ", ".join(sorted(methods))
