"""The answer of a token-count side route (Anthropic's `count_tokens`, Gemini's `countTokens`),
once the API has authenticated the caller and translated the body: the model checked through the
gate, then the worker's own tokenizer where the model's workers serve vLLM's `POST /tokenize`
(`tokenize: true`), else, or when that call fails, the gateway's estimate (the one its token
limits reserve). `x-sluicegate-token-count` says which: `worker` or `estimate`. A worker's count
costs a worker call: it counts against the key's request limits (the gate's `worker_call`); an
estimate costs nothing."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.context import RequestContext
from gateway.keys.auth import Principal
from gateway.proxy.prompt_count import tokenize_body, worker_prompt_tokens
from gateway.state import app_state

TOKEN_COUNT_HEADER = "x-sluicegate-token-count"  # noqa: S105 (a header name, not a secret)


async def answer(
    request: Request,
    ctx: RequestContext,
    principal: Principal,
    model: str,
    chat: dict[str, Any],
    *,
    estimate: int,
    field: str,
) -> Response:
    """`{field: count}` for the chat body `chat` of `model`; `estimate`: the gateway's."""
    state = app_state(request.scope)
    gate = state["gate"]
    route = gate.model(principal.key, model, ctx)
    counted = None
    if route.model.tokenize:  # a worker call: under the key's request limits
        async with gate.worker_call(principal, ctx):
            # The tokenizer of a usable endpoint, chat template applied; None when none can say.
            counted = await worker_prompt_tokens(
                state["upstream"], route, lambda pool: tokenize_body(chat, pool.wire_model)
            )
    return Response(
        orjson.dumps({field: estimate if counted is None else counted}),
        media_type="application/json",
        headers={TOKEN_COUNT_HEADER: "estimate" if counted is None else "worker"},
    )
