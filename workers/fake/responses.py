"""OpenAI Responses, `POST /v1/responses` and the stored-response routes, as vLLM 0.32 serves them
(read from a real vLLM 0.32.0 started with `VLLM_ENABLE_RESPONSES_API_STORE=1`, and its
`vllm/entrypoints/openai/responses`).

Token model: the prompt is the words of `instructions` and of `input` (a string, or items: the text
of messages, whose content is a string or `input_text`/`output_text` parts, the `output` of
`function_call_output` and the `arguments` of `function_call` items), plus, with
`previous_response_id`, the whole stored conversation (its prompt and its output tokens); at least
1. Completion token i is `tok{i} `; `max_output_tokens` caps, and then `status` is "incomplete" with
`incomplete_details: {"reason": "max_output_tokens"}`.

- The answer is vLLM's `response` object (`id` "resp_…", `object` "response", `created_at`,
  `model`, `status`, `output`: one `message` item with one `output_text` part, `usage`:
  {input_tokens, input_tokens_details, output_tokens, output_tokens_details, total_tokens}), with
  every other field vLLM writes.
- A stream is `event: <type>\\ndata: <json>\\n\\n` events numbered by `sequence_number` from 0:
  `response.created` and `response.in_progress` (the response, `status` "in_progress"),
  `response.output_item.added`, `response.content_part.added`, one `response.output_text.delta`
  per token, `response.output_text.done`, `response.content_part.done`,
  `response.output_item.done`, then `response.completed` with the whole response and its usage;
  the body ends there. vLLM sends `response.completed` also when `status` is "incomplete" (it
  never sends `response.incomplete`). A failure mid-stream is OpenAI's `error` event
  (`{"code", "message", "param", "sequence_number", "type": "error"}`), then the end of the body.
- Stored: a response that finished is kept in this process's memory unless the request said
  `"store": false` (vLLM keeps it only when started with `VLLM_ENABLE_RESPONSES_API_STORE=1`; it
  never evicts). Two fake workers share nothing. `GET /v1/responses/{id}` answers it again,
  `POST …/cancel` answers 400 "Cannot cancel a synchronous response." (every response here is
  synchronous), `DELETE` answers `{"id", "object": "response", "deleted": true}` and
  `GET …/input_items` `{"object": "list", "data", "first_id", "last_id", "has_more"}` (OpenAI's
  shapes: vLLM 0.32 has neither route, 405 and 404). An unknown id, there or as
  `previous_response_id`, is 404 `{"error": {"message": "Response with id '…' not found.", "type":
  "invalid_request_error", "param": "response_id", "code": 404}}`. `background: true` is refused
  (400): the fake runs nothing in the background.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from workers.common.errors import RequestError, validation_error
from workers.fake.generation import token_text
from workers.fake.plan import Plan, make_plan
from workers.fake.stored import Stored

if TYPE_CHECKING:
    from workers.fake.app import FakeWorker

JSONObject = dict[str, Any]
_FIRST = {"output_index": 0}


def _hex() -> str:
    return uuid.uuid4().hex[:16]


def sse_event(payload: JSONObject) -> bytes:
    return b"event: " + str(payload["type"]).encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


# --- the request ---------------------------------------------------------------------------------


def _words(text: Any) -> int:
    return len(text.split()) if isinstance(text, str) else 0


def _message_content(item: JSONObject) -> list[JSONObject]:
    content = item.get("content")
    if isinstance(content, str):
        kind = "output_text" if item.get("role") == "assistant" else "input_text"
        return [{"type": kind, "text": content}]
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        return content
    raise validation_error("input", "input: message content must be a string or a list of parts")


def input_items(body: Mapping[str, Any]) -> list[JSONObject]:
    """The request's input as the items `input_items` lists, each with an id."""
    value = body.get("input")
    if isinstance(value, str):
        message = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}
        return [{"id": f"msg_{_hex()}", **message}]
    if not isinstance(value, list):
        raise validation_error("input", "input: Input should be a valid string or list of items")
    items = []
    for raw in value:
        if not isinstance(raw, dict):
            raise validation_error("input", "input: every item must be an object")
        item = dict(raw)
        if item.get("type", "message") == "message":
            if item.get("role") not in ("user", "assistant", "system", "developer"):
                raise validation_error("input", "input: a message needs a role")
            item = {**item, "type": "message", "content": _message_content(item)}
        prefix = "msg" if item["type"] == "message" else "item"
        items.append({"id": item.get("id") or f"{prefix}_{_hex()}", **item})
    return items


def item_words(item: JSONObject) -> int:
    if item.get("type") == "message":
        return sum(_words(part.get("text")) for part in item["content"])
    if item.get("type") == "function_call_output":
        return _words(item.get("output"))
    if item.get("type") == "function_call":
        return _words(item.get("arguments"))
    return 0


def _max_output_tokens(body: Mapping[str, Any]) -> int | None:
    value = body.get("max_output_tokens")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise validation_error("max_output_tokens", "max_output_tokens: Input should be a valid integer")
    if value < 1:
        raise RequestError(400, f"max_tokens must be at least 1, got {value}.", "max_tokens")
    return value


# --- the answer ----------------------------------------------------------------------------------


def _usage(input_tokens: int, output_tokens: int) -> JSONObject:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": 0,
            "cache_write_tokens": 0,
            "input_tokens_per_turn": [],
            "cached_tokens_per_turn": [],
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {
            "reasoning_tokens": 0,
            "tool_output_tokens": 0,
            "output_tokens_per_turn": [],
            "tool_output_tokens_per_turn": [],
        },
        "total_tokens": input_tokens + output_tokens,
    }


def _part(text: str, logprobs: list[Any] | None) -> JSONObject:
    return {"annotations": [], "text": text, "type": "output_text", "logprobs": logprobs}


def _message_item(item_id: str, text: str | None) -> JSONObject:
    """The output message: in progress and empty when `text` is None, else completed."""
    content = [] if text is None else [_part(text, None)]
    status = "in_progress" if text is None else "completed"
    return {
        "id": item_id,
        "content": content,
        "role": "assistant",
        "status": status,
        "type": "message",
        "phase": None,
    }


@dataclass(slots=True)
class Answer:
    """One response being made: what its request fixed and what its generation will be."""

    response_id: str
    item_id: str
    created_at: int
    model: str
    body: Mapping[str, Any]
    plan: Plan
    input_tokens: int
    items: list[JSONObject]

    @property
    def text(self) -> str:
        return "".join(token_text(i) for i in range(self.plan.tokens))

    def response(self, *, done: bool) -> JSONObject:
        """The response object: in progress (no output, no usage) or finished."""
        body = self.body
        incomplete = done and self.plan.finish_reason == "length"
        status = "in_progress" if not done else "incomplete" if incomplete else "completed"
        return {
            "id": self.response_id,
            "created_at": self.created_at,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": body.get("instructions"),
            "metadata": body.get("metadata"),
            "model": self.model,
            "object": "response",
            "output": [_message_item(self.item_id, self.text)] if done else [],
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "temperature": float(body.get("temperature") or 1.0),
            "tool_choice": body.get("tool_choice", "none"),
            "tools": body.get("tools") or [],
            "top_p": float(body.get("top_p") or 1.0),
            "background": False,
            "max_output_tokens": body.get("max_output_tokens"),
            "max_tool_calls": body.get("max_tool_calls"),
            "previous_response_id": body.get("previous_response_id"),
            "prompt": None,
            "reasoning": body.get("reasoning"),
            "service_tier": "auto",
            "status": status,
            "text": None,
            "top_logprobs": None,
            "truncation": "disabled",
            "usage": _usage(self.input_tokens, self.plan.tokens) if done else None,
            "user": body.get("user"),
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "input_messages": None,
            "output_messages": None,
        }

    def stored(self) -> Stored:
        return Stored(self.response(done=True), self.items, self.input_tokens + self.plan.tokens)


class ResponseEvents:
    """The events of one streamed response (`NativeEvents`), numbered as vLLM numbers them."""

    def __init__(self, answer: Answer, on_done: Callable[[], None]) -> None:
        self.answer = answer
        self.on_done = on_done
        self.sequence = 0

    def _event(self, kind: str, payload: JSONObject) -> bytes:
        # vLLM dumps OpenAI's event models, whose fields are declared in alphabetical order.
        event = dict(sorted({**payload, "sequence_number": self.sequence, "type": kind}.items()))
        self.sequence += 1
        return sse_event(event)

    def _text_event(self, kind: str, **fields: Any) -> bytes:
        head = {"content_index": 0, **fields, "item_id": self.answer.item_id}
        return self._event(kind, {**head, "output_index": 0})

    def opening(self) -> list[bytes]:
        started = self.answer.response(done=False)
        item = _message_item(self.answer.item_id, None)
        return [
            self._event("response.created", {"response": started}),
            self._event("response.in_progress", {"response": started}),
            self._event("response.output_item.added", {"item": item, **_FIRST}),
            self._text_event("response.content_part.added", part=_part("", [])),
        ]

    def token(self, i: int) -> bytes:
        head = {"content_index": 0, "delta": token_text(i), "item_id": self.answer.item_id}
        return self._event("response.output_text.delta", {**head, "logprobs": [], "output_index": 0})

    def closing(self) -> list[bytes]:
        text, item_id = self.answer.text, self.answer.item_id
        head = {"content_index": 0, "item_id": item_id, "logprobs": [], "output_index": 0}
        events = [
            self._event("response.output_text.done", {**head, "text": text}),
            self._text_event("response.content_part.done", part=_part(text, None)),
            self._event(
                "response.output_item.done", {"item": _message_item(item_id, text), "output_index": 0}
            ),
        ]
        self.on_done()
        events.append(self._event("response.completed", {"response": self.answer.response(done=True)}))
        return events

    def failure(self, message: str) -> bytes:
        return self._event("error", {"code": "server_error", "message": message, "param": None})


# --- the routes ----------------------------------------------------------------------------------


async def create_response(worker: FakeWorker, request: Request) -> Response:
    record = await worker.intake(request)
    if record is None:
        return worker.gone()
    try:
        body = worker.json_body(record, validation=True)
        items = input_items(body)
        cap = _max_output_tokens(body)
        model = worker.model_of(body)
        if body.get("background") is True:
            raise RequestError(400, "the fake worker does not run background responses", "background")
        tokens = _words(body.get("instructions")) + sum(item_words(item) for item in items)
        previous = body.get("previous_response_id")
        if previous is not None:
            tokens += worker.responses.get(str(previous)).conversation_tokens
        plan = make_plan(record.headers, {} if cap is None else {"max_tokens": cap}, chat=False)
    except RequestError as err:
        return worker.error(record, err)
    answer = Answer(
        f"resp_{_hex()}", f"msg_{_hex()}", int(time.time()), model, body, plan, max(tokens, 1), items
    )

    def store() -> None:
        if body.get("store") is not False:
            worker.responses.put(answer.stored())

    if body.get("stream") is not True:

        def build() -> bytes:
            store()
            return orjson.dumps(answer.response(done=True))

        return await worker.whole(request.receive, record, plan, model, build)
    return worker.native_stream(record, plan, model, ResponseEvents(answer, store))
