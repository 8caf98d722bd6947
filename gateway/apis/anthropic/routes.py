"""The Anthropic routes: `POST /v1/messages` (the one pipeline, with the Messages dialect) and
`POST /v1/messages/count_tokens`: the worker's own tokenizer where the model's workers serve
vLLM's `POST /tokenize` (`tokenize: true`), else, or when that call fails, the gateway's estimate
(the one its token limits reserve). `x-sluicegate-token-count` says which: `worker` or `estimate`.
A worker's count costs a worker call: it counts against the key's request limits (the gate's
`worker_call`); an estimate costs nothing.

Both answer with a `request-id` header, where Anthropic's SDKs look for it (their errors carry
it): the gateway's own request id, the one in its access log and usage record.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Message, Scope, Send

from gateway.apis.anthropic.dialect import MESSAGES
from gateway.apis.anthropic.request import translate
from gateway.apis.endpoint import ProxyEndpoint
from gateway.apis.spec import SideRoute
from gateway.http.body import read_body
from gateway.http.context import RequestContext
from gateway.proxy.prompt_count import tokenize_body, worker_prompt_tokens
from gateway.proxy.translation.bounds import check_values
from gateway.routing.router import ModelRoute
from gateway.state import app_state

TOKEN_COUNT_HEADER = "x-sluicegate-token-count"  # noqa: S105 (a header name, not a secret)


def with_request_id(scope: Scope, send: Send) -> Send:
    request_id = RequestContext.of(scope).request_id.encode()

    async def send_with_id(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", ()), (b"request-id", request_id)]
        await send(message)

    return send_with_id


async def _count(request: Request, ctx: RequestContext) -> Response:
    """Through the same gate as /v1/messages (the key must be allowed the model)."""
    state = app_state(request.scope)
    gate, settings = state["gate"], state["settings"]
    principal = await gate.caller(request, ctx)
    body = await read_body(request, settings.max_body_bytes, settings.body_timeout_s)
    check_values(body, settings.max_body_values)
    parsed = translate(body, needs_max_tokens=False)
    ctx.ignored = parsed.ignored  # named in x-sluicegate-ignored, as on /v1/messages
    ctx.requested_model = parsed.model
    route = gate.model(principal.key, parsed.model, ctx)
    counted = None
    if route.model.tokenize:  # a worker call: under the key's request limits
        async with gate.worker_call(principal, ctx):
            counted = await _worker_count(request, route, parsed.chat)
    return Response(
        orjson.dumps({"input_tokens": parsed.prompt_estimate if counted is None else counted}),
        media_type="application/json",
        headers={TOKEN_COUNT_HEADER: "estimate" if counted is None else "worker"},
    )


async def _worker_count(request: Request, route: ModelRoute, chat: dict[str, Any]) -> int | None:
    """The prompt's tokens by the tokenizer of a usable endpoint, chat template applied; None
    when no endpoint can say (the estimate stands in, and says so)."""
    upstream = app_state(request.scope)["upstream"]
    return await worker_prompt_tokens(upstream, route, lambda pool: tokenize_body(chat, pool.wire_model))


# x-sluicegate-ignored: the middleware adds it; `request-id`: the API's `answer_headers`.
SIDE_ROUTES = (SideRoute("/v1/messages/count_tokens", ("POST",), "messages.count_tokens", _count),)


def routes() -> list[BaseRoute]:
    return [Route("/v1/messages", ProxyEndpoint(MESSAGES, with_request_id), methods=["POST"])]
