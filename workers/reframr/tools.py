"""OpenAI `tools` <-> Reframr's `<tool_call> NAME {json}` text.

Reframr asks for a tool by writing `<tool_call> NAME {json arguments}`; it has no constrained
decoding, so what it writes is checked here against the request before it becomes a tool call:

- Only text that starts (after whitespace) with `<tool_call>` and consists of one or more
  `<tool_call> NAME {json object}` is a call; anything after the last object makes it plain text.
- NAME must be one of the request's tools (only the named one when `tool_choice` names a function);
  the arguments must be a JSON object. Otherwise the whole text stays text: a half-right call is
  not guessed into a right one.
- `tool_choice: "none"` turns parsing off. `"required"` cannot force Reframr to call a tool; if it
  does not, the answer is text.

Arguments are re-serialised with `json.dumps(ensure_ascii=False)`, as vLLM's hermes parser does.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workers.common.errors import bad_request

TOOL_CALL_TAG = "<tool_call>"
TOOL_RESULT_TAG = "<tool_result>"
_NAME = re.compile(r"\s*([^\s{]+)\s*")
_DECODER = json.JSONDecoder()


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    """A JSON object, as a string."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


def format_tool_call(name: str, arguments: str) -> str:
    return f"{TOOL_CALL_TAG} {name} {arguments}"


def callable_tools(body: Mapping[str, Any]) -> frozenset[str] | None:
    """Tool names a model call may use, or None when the request turns tool calls off (or has none).

    Raises RequestError (400) for malformed `tools` / `tool_choice`.
    """
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools is None:
        if choice not in (None, "none"):
            raise bad_request("tool_choice needs tools", "tool_choice")
        return None
    if not isinstance(tools, list):
        raise bad_request("tools must be a list", "tools")
    names: set[str] = set()
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or tool.get("type") != "function":
            raise bad_request('each tool must be {"type": "function", "function": {...}}', "tools")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise bad_request("each tool function needs a name", "tools")
        names.add(function["name"])
    if choice is None or choice in ("auto", "required"):
        return frozenset(names)
    if choice == "none":
        return None
    function = choice.get("function") if isinstance(choice, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise bad_request('tool_choice must be "none", "auto", "required" or a named function', "tool_choice")
    if function["name"] not in names:
        raise bad_request(f"tool_choice names {function['name']!r}, which is not in tools", "tool_choice")
    return frozenset((function["name"],))


def new_call_id() -> str:
    return f"chatcmpl-tool-{uuid.uuid4().hex}"


def parse_tool_calls(text: str, allowed: frozenset[str]) -> list[ToolCall] | None:
    """The calls `text` makes, or None when it is not entirely valid calls to `allowed` tools."""
    calls: list[ToolCall] = []
    pos = len(text) - len(text.lstrip())
    while pos < len(text):
        if not text.startswith(TOOL_CALL_TAG, pos):
            return None
        match = _NAME.match(text, pos + len(TOOL_CALL_TAG))
        if match is None or match.group(1) not in allowed:
            return None
        try:
            arguments, end = _DECODER.raw_decode(text, match.end())
        except json.JSONDecodeError:
            return None
        if not isinstance(arguments, dict):
            return None
        calls.append(ToolCall(new_call_id(), match.group(1), json.dumps(arguments, ensure_ascii=False)))
        pos = end + len(text[end:]) - len(text[end:].lstrip())
    return calls or None
