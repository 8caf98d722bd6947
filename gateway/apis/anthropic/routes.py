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
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Message, Receive, Scope, Send

from gateway.apis.anthropic import errors as anthropic_errors
from gateway.apis.anthropic.dialect import MESSAGES
from gateway.apis.anthropic.request import translate
from gateway.apis.endpoint import ProxyEndpoint
from gateway.errors import GatewayError
from gateway.http.body import read_body
from gateway.http.context import CLIENT_CLOSED, RequestContext
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


class CountTokens:
    """Through the same gate as /v1/messages (the key must be allowed the model)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = RequestContext.of(scope)
        send = with_request_id(scope, send)  # x-sluicegate-ignored: the middleware adds it
        ctx.api = "messages.count_tokens"
        try:
            response = await self._count(Request(scope, receive), ctx)
        except GatewayError as error:
            ctx.answered_with(error)
            response = anthropic_errors.error_response(error)
        except ClientDisconnect:
            ctx.status, ctx.outcome = CLIENT_CLOSED, "disconnected"  # left while sending its body
            return
        await response(scope, receive, send)

    async def _count(self, request: Request, ctx: RequestContext) -> Response:
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
                counted = await self._worker_count(request, route, parsed.chat)
        return Response(
            orjson.dumps({"input_tokens": parsed.prompt_estimate if counted is None else counted}),
            media_type="application/json",
            headers={TOKEN_COUNT_HEADER: "estimate" if counted is None else "worker"},
        )

    async def _worker_count(self, request: Request, route: ModelRoute, chat: dict[str, Any]) -> int | None:
        """The prompt's tokens by the tokenizer of a usable endpoint, chat template applied; None
        when no endpoint can say (the estimate stands in, and says so)."""
        upstream = app_state(request.scope)["upstream"]
        return await worker_prompt_tokens(upstream, route, lambda pool: tokenize_body(chat, pool.wire_model))


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/messages", ProxyEndpoint(MESSAGES, with_request_id), methods=["POST"]),
        Route("/v1/messages/count_tokens", CountTokens(), methods=["POST"]),
    ]
