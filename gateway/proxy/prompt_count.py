"""A prompt's tokens by a worker's own tokenizer: vLLM's `POST /tokenize` (a model with
`tokenize: true`), chat template applied, on one usable endpoint of the model. None whenever no
endpoint can say (none usable, a failure, an answer that is not a count): callers fall back on
the gateway's estimate and say so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from gateway.errors import GatewayError
from gateway.proxy.upstream import Upstream
from gateway.proxy.usage import MAX_TOKENS
from gateway.routing.pool import Pool
from gateway.routing.router import ModelRoute

# vLLM's /tokenize answers every token id too: a 128k-token prompt is about 1 MB of JSON.
_MAX_TOKENIZE_BYTES = 8 * 1024 * 1024


def tokenize_body(chat: dict[str, Any], wire_model: str) -> dict[str, Any] | None:
    """What /tokenize takes for a chat-contract request: its messages and tools with the
    generation prompt, or a completion's prompt; None for anything else (a prompt of token ids)."""
    messages = chat.get("messages")
    if isinstance(messages, list):
        body: dict[str, Any] = {"model": wire_model, "messages": messages, "add_generation_prompt": True}
        if chat.get("tools"):
            body["tools"] = chat["tools"]
        return body
    prompt = chat.get("prompt")
    return {"model": wire_model, "prompt": prompt} if isinstance(prompt, str) else None


async def worker_prompt_tokens(
    upstream: Upstream, route: ModelRoute, body_for: Callable[[Pool], dict[str, Any] | None]
) -> int | None:
    """`body_for(pool)`: the /tokenize body for the pool chosen (its wire model), or None."""
    pool = next((p for p in route.pools if p.has_usable()), None)
    endpoint = None if pool is None else next((e for e in pool.endpoints if e.usable), None)
    body = None if pool is None or endpoint is None else body_for(pool)
    if endpoint is None or body is None:
        return None
    timeouts = route.model.timeouts
    try:
        answer = await upstream.call_endpoint(
            "POST",
            endpoint.url + "/tokenize",
            body=orjson.dumps(body),
            headers={"content-type": "application/json"},
            connect_s=timeouts.connect,
            total_s=timeouts.idle,
            max_bytes=_MAX_TOKENIZE_BYTES,
        )
    except GatewayError:
        return None
    try:
        count = orjson.loads(answer.body).get("count") if answer.status == 200 else None
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return count if type(count) is int and 0 <= count <= MAX_TOKENS else None
