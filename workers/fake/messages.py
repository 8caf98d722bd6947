"""Anthropic Messages, `POST /v1/messages` and `POST /v1/messages/count_tokens`, as vLLM 0.32
serves them (read from a real vLLM 0.32.0 and its `vllm/entrypoints/anthropic`).

vLLM answers a Messages request by running it as a chat completion and converting the answer, so
the fake's token model is the chat one: the prompt is the words of `system` (a string or text
blocks) and of every message's text (a string, or its `text` blocks and the text of its
`tool_result` blocks); completion token i is `tok{i} `; `max_tokens` (required) caps.

- The answer: `{"id": "chatcmpl-…", "type": "message", "role": "assistant", "content": [{"type":
  "text", "text": …}], "model", "stop_reason": "end_turn" | "max_tokens", "usage": {"input_tokens",
  "output_tokens"}}`; vLLM leaves out `stop_sequence` when it is null, and an empty answer is one
  empty text block.
- A stream is `event: <type>\\ndata: <json>\\n\\n` events: `message_start` (the message with empty
  content and `usage` {input_tokens, output_tokens: 0}), then for a non-empty answer
  `content_block_start`, one `content_block_delta` (`text_delta`) per token, `content_block_stop`,
  then `message_delta` (`delta.stop_reason`, `usage` {input_tokens, output_tokens}) and
  `message_stop`; the body ends there (no `[DONE]`, no `ping`).
- Errors the handler finds (an unknown model, `x-fake-status`, an injected failure) are
  `{"type": "error", "error": {"type": "NotFoundError", "message": …}}` with vLLM's type names;
  errors of request validation (a body that is not JSON, a missing or mistyped field) are the OpenAI
  envelope with type "Bad Request" and param "body.<field>", as vLLM's framework answers them.
- A failure mid-stream is `event: error` with `{"type": "error", "error": {"type":
  "internal_error", "message": …}}`, then the end of the body.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from workers.common.errors import RequestError, validation_error
from workers.fake.generation import token_text
from workers.fake.plan import Plan, make_plan

if TYPE_CHECKING:
    from workers.fake.app import FakeWorker

JSONObject = dict[str, Any]


def sse_event(name: str, payload: JSONObject) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def error_body(err: RequestError) -> JSONObject:
    """vLLM's Messages error body for an error its handler found."""
    return {"type": "error", "error": {"type": err.err_type, "message": err.message}}


def _words(text: Any) -> int:
    return len(text.split()) if isinstance(text, str) else 0


def _block_words(content: Any, field: str) -> int:
    """Words of a string, or of the text blocks (and tool results) of a list of blocks."""
    if isinstance(content, str):
        return _words(content)
    if not isinstance(content, list):
        raise validation_error(field, f"{field}: Input should be a valid string or list of blocks")
    words = 0
    for block in content:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise validation_error(field, f"{field}: every content block must be an object with a type")
        if block["type"] == "text":
            words += _words(block.get("text"))
        elif block["type"] == "tool_result":
            words += _block_words(block.get("content", ""), field)
    return words


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """The prompt's tokens under the fake's token model; raises the validation errors vLLM's
    request model raises (`messages` a list of {role, content}, `system` a string or blocks)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise validation_error("messages", "messages: Input should be a valid list")
    words = 0 if body.get("system") is None else _block_words(body["system"], "system")
    for message in messages:
        # vLLM 0.32 takes a system message anywhere in `messages` (Claude Code sends one after
        # the first user turn); only a chat template with one leading system message refuses it.
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant", "system"):
            raise validation_error("messages", "messages: each message needs role user, assistant or system")
        words += _block_words(message.get("content"), "messages")
    return max(words, 1)


def max_tokens(body: Mapping[str, Any]) -> int:
    value = body.get("max_tokens")
    if value is None:
        raise validation_error("max_tokens", "max_tokens: Field required")
    if not isinstance(value, int) or isinstance(value, bool):
        raise validation_error("max_tokens", "max_tokens: Input should be a valid integer")
    if value < 1:
        raise validation_error("max_tokens", "max_tokens: Value error, max_tokens must be positive")
    return value


def stop_reason(plan: Plan) -> str:
    return "max_tokens" if plan.finish_reason == "length" else "end_turn"


def _usage(input_tokens: int, output_tokens: int) -> JSONObject:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens}


def message_body(message_id: str, model: str, plan: Plan, input_tokens: int) -> bytes:
    text = "".join(token_text(i) for i in range(plan.tokens))
    return orjson.dumps(
        {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "model": model,
            "stop_reason": stop_reason(plan),
            "usage": _usage(input_tokens, plan.tokens),
        }
    )


class MessageEvents:
    """The events of one streamed message (`NativeEvents`), byte for byte vLLM's."""

    def __init__(self, message_id: str, model: str, plan: Plan, input_tokens: int) -> None:
        self.message_id = message_id
        self.model = model
        self.plan = plan
        self.input_tokens = input_tokens

    def opening(self) -> list[bytes]:
        message: JSONObject = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _usage(self.input_tokens, 0),
        }
        return [sse_event("message_start", {"type": "message_start", "message": message})]

    def token(self, i: int) -> bytes:
        delta = {"type": "content_block_delta", "delta": {"type": "text_delta", "text": token_text(i)}}
        event = sse_event("content_block_delta", {**delta, "index": 0})
        if i > 0:
            return event
        # vLLM opens the text block with its first non-empty text.
        block = {"type": "content_block_start", "content_block": {"type": "text", "text": ""}, "index": 0}
        return sse_event("content_block_start", block) + event

    def closing(self) -> list[bytes]:
        events: list[bytes] = []
        if self.plan.tokens:
            events.append(sse_event("content_block_stop", {"type": "content_block_stop", "index": 0}))
        delta = {"stop_reason": stop_reason(self.plan), "stop_sequence": None}
        usage = _usage(self.input_tokens, self.plan.tokens)
        events.append(sse_event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
        events.append(sse_event("message_stop", {"type": "message_stop"}))
        return events

    def failure(self, message: str) -> bytes:
        # vLLM's converter cannot parse the chat layer's error event and reports that instead.
        return sse_event("error", {"type": "error", "error": {"type": "internal_error", "message": message}})


async def create_message(worker: FakeWorker, request: Request) -> Response:
    record = await worker.intake(request)
    if record is None:
        return worker.gone()
    try:
        body = worker.json_body(record, validation=True)
        if not isinstance(body.get("model"), str):
            raise validation_error("model", "model: Field required (a string)")
        tokens = prompt_tokens(body)
        plan = make_plan(record.headers, {"max_tokens": max_tokens(body)}, chat=False)
        model = worker.model_of(body)
    except RequestError as err:
        return worker.error(record, err, anthropic=True)
    message_id = worker.new_id("chatcmpl-")
    if body.get("stream") is not True:
        build = lambda: message_body(message_id, model, plan, tokens)  # noqa: E731
        return await worker.whole(request.receive, record, plan, model, build, anthropic=True)
    return worker.native_stream(record, plan, model, MessageEvents(message_id, model, plan, tokens))


async def count_tokens(worker: FakeWorker, request: Request) -> Response:
    record = await worker.intake(request)
    if record is None:
        return worker.gone()
    try:
        body = worker.json_body(record, validation=True)
        if not isinstance(body.get("model"), str):
            raise validation_error("model", "model: Field required (a string)")
        tokens = prompt_tokens(body)
        worker.model_of(body)
    except RequestError as err:
        return worker.error(record, err, anthropic=True)
    record.finish("completed", 200)
    answer = {"input_tokens": tokens, "context_management": {"original_input_tokens": tokens}}
    return worker.json(answer, record)
