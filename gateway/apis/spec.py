"""`ClientApi`: everything one client API is, declared once, in its own package.

    name             the API, e.g. "anthropic"
    operations       each of its dialects' names (`ctx.api`) -> the GenAI operation of its spans
    credentials      where it takes a key (a header, a header with a scheme, a query parameter)
    routes           its main routes (the pipeline: gateway.apis.endpoint.ProxyEndpoint), mounted
                     by the app in the order of `APIS`
    openapi          its part of the OpenAPI document
    paths            the path prefixes of its requests: each gets the request metrics and, with
                     tracing on, a SERVER span (gateway.edge.middleware); a 404 under them too
    side_routes      its routes beside the pipeline (a token count, the model listings, stored
                     responses), each a `SideRoute`, mounted after `routes`
    envelope         how it tells a `GatewayError` (status, body, headers): every side route's
                     error goes through it once (gateway.apis.endpoint.SideEndpoint); default
                     OpenAI's
    answer_headers   what it adds to every answer of its side routes (Anthropic's `request-id`)
    body_lists       the list fields of its bodies that the item bound counts (messages, parts,
                     tools: gateway.proxy.translation.bounds), so no body of it escapes the
                     bound; an API without such bodies declares none
    hosted_tools     its hosted tool types (a worker cannot run them): a translation drops them as
                     `tools[i]:<type>` entries, refused where a model says `hosted_tools: refuse`
                     (like any dropped tool), and named in the ignored-fields metric's bounded
                     labels (any other type is `tools:other` there)
    home             its entries on the landing page (`GET /`, gateway.edge.home): name -> path
    never_forward    its own protocol headers a worker must not get (its credential headers
                     are never forwarded either: gateway.keys.credentials.secret_headers)
    unknown_routes   how it recognises its own requests to a path or method the gateway does not
                     serve, and answers them in its envelope (None: the OpenAI envelope)
    model_in_path    for an API that names the model in the path: reads it, so the access log
                     has the requested model even when the body is refused
    encoded_paths    raw path prefixes under which a percent-encoded model name may come

The app (gateway.app) is the only reader: it hands each value to the layer that needs it (the
authenticator, the forwarding rule, the middleware, the pipeline, tracing, the 404 handler, the
landing page, the OpenAPI document), so nothing below `gateway.apis` imports it. A new API is a
package that declares one and one line in `gateway.apis.APIS` (or in the `apis` a test hands
`create_app`); no shared module names it.

Route precedence: Starlette takes the first route whose path and method both match, and answers
405 only when a path matched under no route with the method. Two APIs may therefore share a path
prefix with different methods (OpenAI's `GET /v1/models/{model}` and a `POST
/v1/models/{model}:generateContent`) in any order; two routes with the same method whose paths
overlap are taken in the order of `APIS`, then of each API's `routes`, then its `side_routes`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import Scope, Send

from gateway.edge.openapi_parts import OpenApiPart
from gateway.edge.unknown_routes import RouteFamily
from gateway.errors import GatewayError
from gateway.http.context import RequestContext
from gateway.keys.credentials import Credential
from gateway.proxy.translation.bounds import BodyLists


def openai_envelope(error: GatewayError) -> Response:
    """OpenAI's envelope, the gateway's own (gateway.errors)."""
    return error.response()


@dataclass(frozen=True, slots=True)
class SideRoute:
    """A route beside the pipeline. `handle(request, ctx)` authenticates through the gate
    (`app_state(scope)["gate"]`), answers, or raises a `GatewayError` that the API's `envelope`
    tells. `api`: the request's `ctx.api` (the metrics' and access log's label), set before
    `handle` runs, so a refusal is counted under it too. A GET route answers HEAD as well
    (Starlette's rule); `request.method` says which. The app mounts each with a
    `gateway.apis.endpoint.SideEndpoint`; a side call that shares one Starlette route with a main
    one (Gemini's `{model}:countTokens`) is that route's own `SideEndpoint`."""

    path: str
    methods: tuple[str, ...]
    api: str
    handle: Callable[[Request, RequestContext], Awaitable[Response]]


def _no_routes() -> list[BaseRoute]:
    return []


@dataclass(frozen=True, slots=True)
class ClientApi:
    """Only `name`, `credentials`, `openapi` and `paths` are required: an API of side routes alone
    (no dialect, nothing through the pipeline) declares no `operations` nor `routes`."""

    name: str
    credentials: tuple[Credential, ...]
    openapi: OpenApiPart
    paths: tuple[str, ...]
    operations: Mapping[str, str] = field(default_factory=dict)
    routes: Callable[[], list[BaseRoute]] = _no_routes
    side_routes: tuple[SideRoute, ...] = ()
    envelope: Callable[[GatewayError], Response] = openai_envelope
    answer_headers: Callable[[Scope, Send], Send] | None = None
    body_lists: BodyLists = field(default_factory=BodyLists)
    hosted_tools: frozenset[str] = field(default_factory=frozenset)
    home: Mapping[str, str] = field(default_factory=dict)
    never_forward: frozenset[str] = field(default_factory=frozenset)
    unknown_routes: RouteFamily | None = None
    model_in_path: Callable[[str], str | None] | None = None
    encoded_paths: tuple[bytes, ...] = ()
