"""One parsed Responses request, and the pieces of the `response` object it is answered with
(shared by the whole answer and the stream, so both tell the client the same things).

Usage is told from the same report, checked the same way, that the settlement meters
(gateway.proxy.usage.parse_usage): what a client is told is what its team is billed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from gateway.apis.responses import request as req
from gateway.limits.output import AskedOutput
from gateway.proxy.translation.body import dumps, field_error, model_of, open_body
from gateway.proxy.translation.bounds import BodyBounds, BodyLists, check_bounds
from gateway.proxy.translation.ignored import Dropped
from gateway.proxy.translation.tool_names import ToolNames
from gateway.proxy.translation.translated import TranslatedCall
from gateway.proxy.usage import InvalidUsage, Usage, parse_usage

# Finish reasons that leave a response incomplete, and the reason the client is told.
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
# What the item bound counts (gateway.proxy.translation.bounds): the input items, each one's
# content parts, the tools.
LISTS = BodyLists(items=("input",), parts=("content",), tools=("tools",))
BOUNDS = BodyBounds(lists=LISTS)


def new_id(prefix: str) -> str:
    return f"{prefix}_{os.urandom(16).hex()}"


@dataclass(frozen=True, slots=True)
class ResponsesCall(TranslatedCall):
    model: str
    stream: bool
    chat: dict[str, Any]  # the chat request's fields but model and the stream's
    prompt_estimate: int  # ~4 characters a token
    echo: dict[str, Any]  # what the response object repeats of the request
    names: ToolNames = field(default_factory=ToolNames)  # flat names of namespaced tools, to name calls back
    ignored: tuple[str, ...] = ()  # what the translation dropped (gateway.proxy.translation.ignored)
    # `continues`: None (TranslatedCall), as previous_response_id is refused in parsing.

    @property
    def user(self) -> str | None:
        user = self.chat.get("user")
        return user if isinstance(user, str) else None

    def asked_output(self) -> AskedOutput:
        cap = self.chat.get("max_tokens")  # from max_output_tokens
        return AskedOutput(cap if isinstance(cap, int) else None)

    def estimated_prompt_tokens(self) -> int:
        return self.prompt_estimate

    def skeleton(self, answer_name: str, response_id: str, created_at: int) -> dict[str, Any]:
        """The response object before any output."""
        return {
            "id": response_id,
            "object": "response",
            "created_at": created_at,
            "status": "in_progress",
            "error": None,
            "incomplete_details": None,
            "model": answer_name,
            "output": [],
            "usage": None,
            **self.echo,
        }


def _echo(payload: dict[str, Any], chat: dict[str, Any]) -> dict[str, Any]:
    """What the response object repeats of the request (as OpenAI's does), checked to re-encode."""
    reasoning, text, metadata = payload.get("reasoning"), payload.get("text"), payload.get("metadata")
    user = chat.get("user")
    echo = {
        "background": False,
        "instructions": payload.get("instructions"),
        "max_output_tokens": chat.get("max_tokens"),
        "parallel_tool_calls": chat.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": reasoning if isinstance(reasoning, dict) else {"effort": None, "summary": None},
        "store": False,
        "temperature": chat.get("temperature", 1.0),
        "text": text if isinstance(text, dict) and "format" in text else {"format": {"type": "text"}},
        "tool_choice": payload.get("tool_choice") or "auto",
        "tools": payload.get("tools") or [],
        "top_p": chat.get("top_p", 1.0),
        "truncation": "disabled",
        "user": user if isinstance(user, str) else None,
        "metadata": metadata if isinstance(metadata, dict) else {},
    }
    dumps(echo)  # a value orjson cannot write is the client's 400 now, not a 500 later
    return echo


def parse_call(raw: bytes, bounds: BodyBounds = BOUNDS) -> ResponsesCall:
    payload = open_body(raw)
    check_bounds(payload, bounds)
    model = model_of(payload)
    stream = payload.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise field_error("stream", "must be a boolean")
    req.refuse_stateful(payload)
    dropped = Dropped()
    fields, names = req.chat_fields(payload, dropped)
    chat = {"messages": req.messages(payload, names, dropped), **fields}
    # Re-encoded once here: a body orjson cannot write is refused before admission.
    size = len(dumps(chat))
    return ResponsesCall(
        model, bool(stream), chat, max(1, size // 4), _echo(payload, chat), names, dropped.done()
    )


def finish_status(finish_reason: str | None) -> tuple[str, dict[str, str] | None]:
    """The response's status and incomplete_details for the worker's finish reason."""
    reason = _INCOMPLETE.get(finish_reason or "")
    return ("incomplete", {"reason": reason}) if reason else ("completed", None)


def counted(report: Any) -> Usage | None:
    try:
        return parse_usage(report)
    except InvalidUsage:
        return None


def _detail(report: Any, group: str, name: str) -> int:
    details = report.get(group) if isinstance(report, dict) else None
    value = details.get(name) if isinstance(details, dict) else None
    return value if type(value) is int and value >= 0 else 0


def usage_object(usage: Usage, report: Any) -> dict[str, Any]:
    """Responses' usage for the metered counts; the details from the worker's report where it has them."""
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {
            "cached_tokens": _detail(report, "prompt_tokens_details", "cached_tokens"),
            "cache_write_tokens": 0,
        },
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {
            "reasoning_tokens": _detail(report, "completion_tokens_details", "reasoning_tokens")
        },
        "total_tokens": usage.total,
    }


def message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [text_part(text)] if status != "in_progress" else [],
    }


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def reasoning_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    content = [reasoning_part(text)] if status != "in_progress" else []
    return {"id": item_id, "type": "reasoning", "status": status, "summary": [], "content": content}


def reasoning_part(text: str) -> dict[str, Any]:
    return {"type": "reasoning_text", "text": text}


def function_call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str, names: ToolNames | None = None
) -> dict[str, Any]:
    """`names`: a flat name of a namespaced tool is told as OpenAI tells it (name + namespace)."""
    item = {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }
    return item if names is None else names.item(item)


def now() -> int:
    return int(time.time())
