"""OpenAI Responses (`POST /v1/responses`), translated to the chat contract every worker speaks.

The request becomes a chat request (gateway.apis.responses.request), the worker's whole
answer becomes a `response` object here, and its stream becomes Responses events
(gateway.apis.responses.stream). Errors and rate-limit headers are OpenAI's, as on the
chat routes. Nothing is stored: see responses_stored for the routes that would read it back.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import Response

from gateway.apis.openai import dialect as openai
from gateway.apis.responses import call as shape
from gateway.apis.responses.call import ResponsesCall
from gateway.apis.responses.stream import ResponsesStream
from gateway.errors import GatewayError
from gateway.limits.admission import Admission
from gateway.proxy import worker_protocols
from gateway.proxy.dialect import ClientStream
from gateway.proxy.translation import native
from gateway.proxy.translation.bounds import BodyBounds, check_bounds
from gateway.proxy.translation.native import NativeCall
from gateway.proxy.translation.tool_names import ToolNames
from gateway.proxy.usage import InvalidUsage, Usage


def _message(answer: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The first choice's message and finish reason (a Responses request asks for one answer)."""
    choices = answer.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choice, dict):
        return {}, None
    message = choice.get("message")
    reason = choice.get("finish_reason")
    return (message if isinstance(message, dict) else {}), (reason if isinstance(reason, str) else None)


def _reasoning_text(message: dict[str, Any]) -> str:
    # vLLM's reasoning parsers write `reasoning_content` (newer releases also `reasoning`).
    for name in ("reasoning_content", "reasoning"):
        text = message.get(name)
        if isinstance(text, str) and text:
            return text
    return ""


def _tool_calls(message: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(call_id, name, arguments) of each function the worker called."""
    calls = message.get("tool_calls")
    out: list[tuple[str, str, str]] = []
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        assert isinstance(call, dict)
        call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else None
        name, arguments = function.get("name"), function.get("arguments")
        out.append(
            (
                call_id or shape.new_id("call"),
                name if isinstance(name, str) else "",
                arguments if isinstance(arguments, str) else "",
            )
        )
    return out


def output_items(
    message: dict[str, Any], status: str, names: ToolNames | None = None
) -> list[dict[str, Any]]:
    """reasoning, then the message, then function calls: the order a model produces them in. A
    message with neither text nor call is still one (empty) message item."""
    items: list[dict[str, Any]] = []
    reasoning = _reasoning_text(message)
    if reasoning:
        items.append(shape.reasoning_item(shape.new_id("rs"), reasoning, status))
    content = message.get("content")
    calls = _tool_calls(message)
    if (isinstance(content, str) and content) or not calls:
        text = content if isinstance(content, str) else ""
        items.append(shape.message_item(shape.new_id("msg"), text, status))
    for call_id, name, arguments in calls:
        items.append(
            shape.function_call_item(shape.new_id("fc"), call_id, name, arguments, "completed", names)
        )
    return items


@dataclass(frozen=True, slots=True)
class ResponsesDialect:
    name: str = "responses"
    keepalive: bytes | None = None

    def parse(
        self, raw: bytes, native_models: Collection[str] = (), bounds: BodyBounds = shape.BOUNDS
    ) -> ResponsesCall | NativeCall:
        payload = native.for_native(raw, native_models)
        if payload is None:
            return shape.parse_call(raw, bounds)
        check_bounds(payload, bounds)
        return native.responses_call(payload)

    def stream(self, call: ResponsesCall | NativeCall, answer_name: str) -> ClientStream:
        if isinstance(call, NativeCall):
            return native.ResponsesPassThrough(answer_name, call.names)
        return ResponsesStream(call, answer_name)

    def whole(
        self, call: ResponsesCall | NativeCall, answer: dict[str, Any], body: bytes, answer_name: str
    ) -> bytes:
        if isinstance(call, NativeCall):
            try:
                worker_protocols.RESPONSES.usage(answer)
            except InvalidUsage:
                # Told what it is metered with (Settlement), as on the translated path.
                estimate = Usage(call.estimated_prompt_tokens(), self.estimated_completion_tokens(answer))
                answer["usage"] = shape.usage_object(estimate, None)
            if call.names is not None and call.names.back:
                answer["output"] = call.names.output(answer.get("output"))
            return orjson.dumps(native.named(answer, answer_name))
        message, finish_reason = _message(answer)
        status, incomplete = shape.finish_status(finish_reason)
        created = answer.get("created")
        response = call.skeleton(
            answer_name, shape.new_id("resp"), created if type(created) is int else shape.now()
        )
        report = answer.get("usage")
        # What the settlement meters: the worker's counts, or (a report it cannot believe) the
        # gateway's estimates, computed the same way here.
        usage = shape.counted(report) or Usage(
            call.estimated_prompt_tokens(), self.estimated_completion_tokens(answer)
        )
        response.update(
            status=status,
            incomplete_details=incomplete,
            output=output_items(message, status, call.names),
            usage=shape.usage_object(usage, report),
        )
        return orjson.dumps(response)

    def estimated_completion_tokens(self, answer: dict[str, Any]) -> int:
        if answer.get("object") == "response":  # the worker's own Responses answer
            return math.ceil(native.text_chars(answer.get("output")) / 4)
        message, _ = _message(answer)
        content = message.get("content")
        chars = len(content) if isinstance(content, str) else 0
        chars += len(_reasoning_text(message))
        chars += sum(len(name) + len(arguments) for _, name, arguments in _tool_calls(message))
        return math.ceil(chars / 4)

    def error_response(self, error: GatewayError) -> Response:
        return openai.CHAT.error_response(error)

    def limit_headers(self, admission: Admission) -> dict[str, str]:
        return openai.CHAT.limit_headers(admission)


RESPONSES = ResponsesDialect()
