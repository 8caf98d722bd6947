"""The Anthropic routes: `POST /v1/messages` (the one pipeline, with the Messages dialect) and
`POST /v1/messages/count_tokens`, a side route: the worker's own tokenizer or the gateway's
estimate (gateway.apis.token_count).

Both answer with a `request-id` header, where Anthropic's SDKs look for it (their errors carry
it): the gateway's own request id, the one in its access log and usage record.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Message, Scope, Send

from gateway.apis import token_count
from gateway.apis.anthropic.dialect import MESSAGES
from gateway.apis.anthropic.request import translate
from gateway.apis.endpoint import ProxyEndpoint
from gateway.apis.spec import SideRoute
from gateway.http.body import read_body
from gateway.http.context import RequestContext
from gateway.proxy.translation.bounds import check_values
from gateway.state import app_state


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
    return await token_count.answer(
        request,
        ctx,
        principal,
        parsed.model,
        parsed.chat,
        estimate=parsed.prompt_estimate,
        field="input_tokens",
    )


# x-sluicegate-ignored: the middleware adds it; `request-id`: the API's `answer_headers`.
SIDE_ROUTES = (SideRoute("/v1/messages/count_tokens", ("POST",), "messages.count_tokens", _count),)


def routes() -> list[BaseRoute]:
    return [Route("/v1/messages", ProxyEndpoint(MESSAGES, with_request_id), methods=["POST"])]
