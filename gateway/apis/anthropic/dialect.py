"""Anthropic Messages (`POST /v1/messages`) by translation to the worker's OpenAI chat contract,
so every chat worker (vLLM, Reframr, the fake) serves Anthropic clients.

    anthropic_request   the client's body, checked, as a chat body
    anthropic_stream    the worker's chat stream as Messages events
    anthropic_think     `<think>…</think>` in content, told apart from the answer
    anthropic_errors    the gateway's errors in Anthropic's envelope and statuses
    anthropic_routes    the two ASGI endpoints (messages, count_tokens)

The usage the client is told (`usage` of the answer, of `message_delta`) is the worker's report,
the same counts the request is metered with; where the worker's report cannot be trusted, the
gateway's estimates, the same ones it meters then.
"""

from __future__ import annotations

import datetime as dt
import math
import os
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import Response

from gateway.apis.anthropic import errors as anthropic_errors
from gateway.apis.anthropic.request import BOUNDS, Translated, translate
from gateway.apis.anthropic.stream import AnthropicStream, stop_reason
from gateway.apis.anthropic.think import split_whole
from gateway.errors import GatewayError
from gateway.limits.admission import Admission, LimitKind
from gateway.limits.output import AskedOutput
from gateway.proxy import worker_protocols
from gateway.proxy.dialect import ClientStream
from gateway.proxy.translation import native
from gateway.proxy.translation.bounds import BodyBounds, check_bounds
from gateway.proxy.translation.native import NativeCall
from gateway.proxy.translation.translated import TranslatedCall
from gateway.proxy.usage import InvalidUsage, parse_usage


def message_id() -> str:
    return "msg_" + os.urandom(12).hex()


@dataclass(frozen=True, slots=True)
class MessagesCall(TranslatedCall):
    request: Translated

    @property
    def model(self) -> str:
        return self.request.model

    @property
    def stream(self) -> bool:
        return self.request.stream

    @property
    def chat(self) -> dict[str, Any]:
        return self.request.chat

    @property
    def user(self) -> str | None:
        return self.request.user

    @property
    def ignored(self) -> tuple[str, ...]:
        return self.request.ignored

    def asked_output(self) -> AskedOutput:
        return AskedOutput(self.request.max_tokens)

    def estimated_prompt_tokens(self) -> int:
        return self.request.prompt_estimate


@dataclass(frozen=True, slots=True)
class MessagesDialect:
    name: str = "messages"
    # Anthropic's streams carry `ping` events; the gateway sends one when nothing else went out
    # for a while, so proxies and clients with read timeouts do not give up on a long wait.
    keepalive: bytes | None = b'event: ping\ndata: {"type": "ping"}\n\n'

    def parse(
        self, raw: bytes, native_models: Collection[str] = (), bounds: BodyBounds = BOUNDS
    ) -> MessagesCall | NativeCall:
        payload = native.for_native(raw, native_models)
        if payload is None:
            return MessagesCall(translate(raw, bounds=bounds))
        check_bounds(payload, bounds)
        return native.messages_call(payload)

    def stream(self, call: MessagesCall | NativeCall, answer_name: str) -> ClientStream:
        if isinstance(call, NativeCall):
            return native.MessagesPassThrough(answer_name, anthropic_errors.error_event)
        return AnthropicStream(
            message_id=message_id(),
            model=answer_name,
            prompt_estimate=call.estimated_prompt_tokens(),
            stop_sequences=call.request.stop_sequences,
        )

    def whole(
        self, call: MessagesCall | NativeCall, answer: dict[str, Any], body: bytes, answer_name: str
    ) -> bytes:
        if isinstance(call, NativeCall):
            try:
                worker_protocols.MESSAGES.usage(answer)
            except InvalidUsage:
                # Told what it is metered with (Settlement), as on the translated path.
                answer["usage"] = {
                    "input_tokens": call.estimated_prompt_tokens(),
                    "output_tokens": self.estimated_completion_tokens(answer),
                }
            return orjson.dumps(native.named(answer, answer_name))
        choice = _first_choice(answer)
        message = choice.get("message")
        message = message if isinstance(message, dict) else {}
        reason, sequence = stop_reason(
            _str(choice.get("finish_reason")), choice.get("stop_reason"), call.request.stop_sequences
        )
        try:
            usage = parse_usage(answer.get("usage"))
            tokens = (usage.prompt_tokens, usage.completion_tokens)
        except InvalidUsage:
            # What the request is metered with when the worker's report is a lie (Settlement).
            tokens = (call.estimated_prompt_tokens(), self.estimated_completion_tokens(answer))
        return orjson.dumps(
            {
                "id": message_id(),
                "type": "message",
                "role": "assistant",
                "model": answer_name,
                # One block even for an answer of nothing: clients index content[0].
                "content": content_blocks(message) or [{"type": "text", "text": ""}],
                "stop_reason": reason,
                "stop_sequence": sequence,
                "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]},
            }
        )

    def estimated_completion_tokens(self, answer: dict[str, Any]) -> int:
        if answer.get("type") == "message":  # the worker's own Messages answer
            return math.ceil(native.text_chars(answer.get("content")) / 4)
        message = _first_choice(answer).get("message")
        message = message if isinstance(message, dict) else {}
        chars = sum(
            len(block.get("text") or block.get("thinking") or "") for block in content_blocks(message)
        )
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                chars += len(_str(function.get("arguments")) or "")
        return math.ceil(chars / 4)

    def error_response(self, error: GatewayError) -> Response:
        return anthropic_errors.error_response(error)

    def limit_headers(self, admission: Admission) -> dict[str, str]:
        """anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}, each from the tightest
        limit of its kind; reset as an RFC 3339 time."""
        headers: dict[str, str] = {}
        now = dt.datetime.now(dt.UTC)
        for kind, suffix in ((LimitKind.REQUESTS, "requests"), (LimitKind.TOKENS, "tokens")):
            tightest = admission.tightest(kind)
            if tightest is None:
                continue
            reset = now + dt.timedelta(seconds=math.ceil(max(tightest.reset_after_s, 0.0)))
            prefix = f"anthropic-ratelimit-{suffix}"
            headers[f"{prefix}-limit"] = str(tightest.limit.amount)
            headers[f"{prefix}-remaining"] = str(max(tightest.remaining, 0))
            headers[f"{prefix}-reset"] = reset.strftime("%Y-%m-%dT%H:%M:%SZ")
        return headers


def content_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat answer's message as Anthropic content: thinking, text, then tool_use blocks."""
    blocks: list[dict[str, Any]] = []
    reasoning = _str(message.get("reasoning_content")) or _str(message.get("reasoning"))
    if reasoning:
        blocks.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    for thinking, text in split_whole(_str(message.get("content")) or ""):
        if thinking:
            blocks.append({"type": "thinking", "thinking": text, "signature": ""})
        else:
            blocks.append({"type": "text", "text": text})
    calls = message.get("tool_calls")
    for i, call in enumerate(calls if isinstance(calls, list) else ()):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        call_id = _str(call.get("id")) or f"toolu_{i}"
        blocks.append(
            {
                "type": "tool_use",
                "id": call_id,
                "name": _str(function.get("name")) or "",
                "input": _input(function),
            }
        )
    return blocks


def _input(function: dict[str, Any]) -> dict[str, Any]:
    """A tool call's arguments as the object Anthropic's `input` must be; arguments that are
    no JSON object (a model's mistake) become an empty one rather than a failed answer."""
    try:
        value = orjson.loads(_str(function.get("arguments")) or "{}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _first_choice(answer: dict[str, Any]) -> dict[str, Any]:
    choices = answer.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


MESSAGES = MessagesDialect()
