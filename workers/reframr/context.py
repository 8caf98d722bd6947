"""OpenAI chat messages -> the plain-text context Reframr reads.

Reframr is not a chat-template model: its own helper, `compose_generation_context(prompt, system=...,
messages=..., tool_results=...)`, writes the conversation as plain text and uses protocol tokens only
for tools. This module follows the same order (system first, then the conversation, tool results
as tool results, ending on the assistant's turn). The helper's exact layout is not published, so
this is the worker's own, fixed and documented here:

    System: <every system/developer message, in order, one per line>

    User: <text>

    Assistant: <text>
    <tool_call> NAME {"json": "arguments"}

    <tool_result> NAME <tool message content>

    Assistant:

Turns are separated by a blank line. A `content` list contributes its text parts, one per line;
any other part is a 400, since Reframr reads text only. An assistant turn's `tool_calls` are written
in the model's own `<tool_call> NAME {json}` syntax; a `tool` message's NAME is its `name` field, or
else the name of the call its `tool_call_id` answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workers.common.errors import bad_request
from workers.reframr.tools import TOOL_RESULT_TAG, format_tool_call

SYSTEM = "System:"
USER = "User:"
ASSISTANT = "Assistant:"
TURN_SEPARATOR = "\n\n"
_ROLES = ("system", "developer", "user", "assistant", "tool")


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise bad_request(
                    "Reframr reads text only: every content part must be a text part", "messages"
                )
            parts.append(part["text"])
        return "\n".join(parts)
    raise bad_request("message content must be a string or a list of parts", "messages")


def _assistant_turn(message: Mapping[str, Any], call_names: dict[str, str]) -> str:
    lines = [_text(message)]
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise bad_request("tool_calls must be a list", "messages")
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad_request("each tool call needs function.name", "messages")
        arguments = function.get("arguments")
        lines.append(format_tool_call(function["name"], arguments if isinstance(arguments, str) else "{}"))
        if isinstance(call.get("id"), str):
            call_names[call["id"]] = function["name"]
    return f"{ASSISTANT} " + "\n".join(line for line in lines if line)


def _tool_turn(message: Mapping[str, Any], call_names: dict[str, str]) -> str:
    name = message.get("name")
    if not isinstance(name, str):
        name = call_names.get(str(message.get("tool_call_id")), "tool")
    return f"{TOOL_RESULT_TAG} {name} {_text(message).strip()}"


def compose_chat_context(messages: Any) -> str:
    """The context for a chat request's `messages`; raises RequestError (400) on a malformed list."""
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty list", "messages")
    system: list[str] = []
    turns: list[str] = []
    call_names: dict[str, str] = {}
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            raise bad_request(f"each message must be an object with a role in {_ROLES}", "messages")
        role = message["role"]
        if role in ("system", "developer"):
            system.append(_text(message))
        elif role == "user":
            turns.append(f"{USER} {_text(message)}")
        elif role == "assistant":
            turns.append(_assistant_turn(message, call_names))
        else:
            turns.append(_tool_turn(message, call_names))
    head = [f"{SYSTEM} " + "\n".join(system)] if system else []
    return TURN_SEPARATOR.join([*head, *turns, ASSISTANT])


def last_turn(context: str) -> str:
    """The last turn before the trailing assistant marker (the whole text for a bare prompt)."""
    body = context.removesuffix(ASSISTANT).rstrip()
    return body.rsplit(TURN_SEPARATOR, 1)[-1]


def completion_context(prompt: Any) -> str:
    """`/v1/completions` sends its prompt to Reframr unchanged; one prompt per request."""
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise bad_request("prompt must be a string (or a list of exactly one string)", "prompt")
    return prompt
