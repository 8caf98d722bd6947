"""`ClientApi`: everything one client API is, declared once, in its own package.

    name             the API, e.g. "anthropic"
    operations       each of its dialects' names (`ctx.api`) -> the GenAI operation of its spans
    credentials      where it takes a key (a header, a header with a scheme, a query parameter)
    never_forward    its own protocol headers a worker must not get (its credential headers
                     are never forwarded either: gateway.keys.credentials.secret_headers)
    routes           its main and side routes, mounted by the app in the order of `APIS`
    openapi          its part of the OpenAPI document
    unknown_routes   how it recognises its own requests to a path or method the gateway does not
                     serve, and answers them in its envelope (None: the OpenAI envelope)
    hosted_tools     its hosted tool types (a worker cannot run them): dropped as `tools[i]:<type>`
                     entries, refused where a model says `hosted_tools: refuse` (like every
                     API's), and named in the ignored-fields metric's bounded labels
    model_in_path    for an API that names the model in the path: reads it, so the access log
                     has the requested model even when the body is refused
    encoded_paths    raw path prefixes under which a percent-encoded model name may come

The app (gateway.app) is the only reader: it hands each value to the layer that needs it (the
authenticator, the forwarding rule, tracing, the 404 handler, the OpenAPI document), so nothing
below `gateway.apis` imports it.

Route precedence: Starlette takes the first route whose path and method both match, and answers
405 only when a path matched under no route with the method. Two APIs may therefore share a path
prefix with different methods (OpenAI's `GET /v1/models/{model}` and a `POST
/v1/models/{model}:generateContent`) in any order; two routes with the same method whose paths
overlap are taken in the order of `APIS`, then of each API's `routes`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from starlette.routing import BaseRoute

from gateway.edge.openapi_parts import OpenApiPart
from gateway.edge.unknown_routes import RouteFamily
from gateway.keys.credentials import Credential


@dataclass(frozen=True, slots=True)
class ClientApi:
    name: str
    operations: Mapping[str, str]
    credentials: tuple[Credential, ...]
    routes: Callable[[], list[BaseRoute]]
    openapi: OpenApiPart
    never_forward: frozenset[str] = field(default_factory=frozenset)
    unknown_routes: RouteFamily | None = None
    hosted_tools: frozenset[str] = field(default_factory=frozenset)
    model_in_path: Callable[[str], str | None] | None = None
    encoded_paths: tuple[bytes, ...] = ()
