"""The Gemini routes. The model and the method are in the path, `models/{model}:{method}`:

    POST /v1beta/models/{model}:generateContent          the one pipeline, a whole answer
    POST /v1beta/models/{model}:streamGenerateContent    the pipeline, streamed: `?alt=sse` as SSE,
                                                         without it as one JSON array
    POST /v1beta/models/{model}:countTokens              {"totalTokens"}: the worker's tokenizer
                                                         (`tokenize: true`), else the estimate
    GET  /v1beta/models, /v1beta/models/{model}          the key's models only
    the POST routes under /v1/ too (google-genai 3.x calls /v1/models/...); `GET /v1/models` and
    `/v1/models/{id}` stay OpenAI's: same method and path

The key comes as `x-goog-api-key` or `?key=` (gateway.apis.gemini: its credentials), through the
gate every route takes.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Message, Receive, Scope, Send

from gateway.apis import token_count
from gateway.apis.endpoint import SideEndpoint
from gateway.apis.gemini import errors
from gateway.apis.gemini.dialect import NAME, GeminiDialect
from gateway.apis.gemini.request import translate
from gateway.apis.spec import SideRoute
from gateway.errors import ErrorCode, GatewayError
from gateway.http.body import read_body
from gateway.http.context import RequestContext
from gateway.proxy.translation.body import field_error, open_body
from gateway.proxy.translation.bounds import check_values
from gateway.proxy.worker_errors import sanitised
from gateway.routing.router import ModelRoute
from gateway.state import app_state

GENERATE, STREAM, COUNT = "generateContent", "streamGenerateContent", "countTokens"
PREFIXES = ("/v1beta/models/", "/v1/models/")
MODELS_API = "models"
_METHODS = (GENERATE, STREAM, COUNT)


def split_target(target: str) -> tuple[str, str]:
    """`{model}:{method}` -> (model, method); a model name may hold `:` (`qwen3:8b`), the method not."""
    model, _, method = target.rpartition(":")
    return model.removeprefix("models/"), method


def model_in_path(path: str) -> str | None:
    """The model a Gemini path names (for the access log, also when the body is refused)."""
    for prefix in PREFIXES:
        if path.startswith(prefix) and ":" in path:
            model, method = split_target(path[len(prefix) :])
            return model if method in _METHODS and model else None
    return None


def _json_array(send: Send) -> Send:
    """A stream without `alt=sse` is one JSON array: say so instead of text/event-stream."""

    async def send_as_json(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [
                (k, b"application/json")
                if k == b"content-type" and v.startswith(b"text/event-stream")
                else (k, v)
                for k, v in message.get("headers", ())
            ]
        await send(message)

    return send_as_json


def _not_served(method: str) -> GatewayError:
    return GatewayError(
        ErrorCode.NOT_FOUND,
        f"The method '{sanitised(method[:40])}' is not served here: generateContent, "
        "streamGenerateContent and countTokens are.",
    )


async def _unknown_method(request: Request, ctx: RequestContext) -> Response:
    raise _not_served(split_target(request.path_params["model"])[1])


class ModelMethod:
    """`POST .../models/{model}:{method}`: generateContent and streamGenerateContent through the
    pipeline; countTokens, and a method not served, as side routes of their own (one Starlette
    route a path: OpenAPI names one operation for it). An ASGI class, not a function: Starlette
    would take a function for a request handler."""

    def __init__(self) -> None:
        self.count = SideEndpoint(f"{NAME}.count_tokens", _count, errors.error_response)
        self.unknown = SideEndpoint(NAME, _unknown_method, errors.error_response)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        model, method = split_target(scope["path_params"]["model"])
        if method in (GENERATE, STREAM) and model:
            sse = method == GENERATE or _query(scope, "alt") == "sse"
            dialect = GeminiDialect.of(model, streaming=method == STREAM, sse=sse)
            RequestContext.of(scope).requested_model = model
            await app_state(scope)["pipeline"].serve(
                dialect, scope, receive, send if sse else _json_array(send)
            )
        elif method == COUNT:
            await self.count(scope, receive, send)
        else:
            await self.unknown(scope, receive, send)


async def _count(request: Request, ctx: RequestContext) -> Response:
    """Checked like generateContent (the key must be allowed the model)."""
    model = split_target(request.path_params["model"])[0]
    if not model:
        raise _not_served(COUNT)
    state = app_state(request.scope)
    gate, settings = state["gate"], state["settings"]
    principal = await gate.caller(request, ctx)
    ctx.requested_model = model
    raw = await read_body(request, settings.max_body_bytes, settings.body_timeout_s)
    check_values(raw, settings.max_body_values)
    body = open_body(raw)
    inner = body.get("generateContentRequest", body.get("generate_content_request"))
    if inner is not None and not isinstance(inner, dict):
        raise field_error("generateContentRequest", "must be an object")
    parsed = translate(inner if isinstance(inner, dict) else body, model)
    ctx.ignored = parsed.ignored  # named in x-sluicegate-ignored, as on generateContent
    return await token_count.answer(
        request, ctx, principal, model, parsed.chat, estimate=parsed.prompt_estimate, field="totalTokens"
    )


def _entry(name: str, route: ModelRoute) -> dict[str, Any]:
    """A model as Gemini's `Model` resource."""
    entry: dict[str, Any] = {
        "name": f"models/{name}",
        "baseModelId": route.model.name,
        "version": "sluicegate",
        "displayName": name,
        "supportedGenerationMethods": list(_METHODS),
    }
    return entry


def _json(data: object) -> Response:
    return Response(orjson.dumps(data), media_type="application/json")


async def _listing(request: Request, ctx: RequestContext, one: str | None) -> Response:
    gate = app_state(request.scope)["gate"]
    key = (await gate.caller(request, ctx)).key
    if one is None:
        models = [
            _entry(name, route)
            for route in gate.models(key)
            for name in (route.model.name, *route.model.aliases)
        ]
        return _json({"models": models})
    name = one.removeprefix("models/")
    return _json(_entry(name, gate.visible(key, name)))


async def _list_models(request: Request, ctx: RequestContext) -> Response:
    return await _listing(request, ctx, None)


async def _get_model(request: Request, ctx: RequestContext) -> Response:
    return await _listing(request, ctx, request.path_params["model"])


def _query(scope: Scope, name: str) -> str | None:
    return Request(scope).query_params.get(name)


SIDE_ROUTES = (
    SideRoute("/v1beta/models", ("GET",), MODELS_API, _list_models),
    # `:path`: model names may hold a `/` (`meta-llama/Llama-3-8B`)
    SideRoute("/v1beta/models/{model:path}", ("GET",), MODELS_API, _get_model),
)


def routes() -> list[BaseRoute]:
    method = ModelMethod()
    # `{model}:{method}` on POST; one name for the parameter on every method of a path, as
    # OpenAPI requires (OpenAI's `GET /v1/models/{model}` shares the second).
    return [Route(f"{prefix}{{model:path}}", method, methods=["POST"]) for prefix in PREFIXES]
