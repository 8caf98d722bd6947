"""What one request asks the fake worker to do: its token counts and its `x-fake-*` programming.

Everything here is pure (no I/O, no clock), so the worker's behaviour for a given request and set of
headers is fully decided before the first byte goes out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workers.common.errors import RequestError, bad_request

# Header names, not secrets (S105 trips over "token" in the variable names).
H_TOKENS = "x-fake-tokens"
H_TOKEN_DELAY = "x-fake-token-delay-ms"  # noqa: S105
H_FIRST_TOKEN_DELAY = "x-fake-first-token-delay-ms"  # noqa: S105
H_STATUS = "x-fake-status"
H_FAIL_AFTER = "x-fake-fail-after"
H_ERROR_EVENT_AFTER = "x-fake-error-event-after"
H_STALL = "x-fake-stall"
H_HOLD_AFTER = "x-fake-hold-after"
H_TOOL_CALL = "x-fake-tool-call"
H_REASONING = "x-fake-reasoning"
H_REASONING_AS = "x-fake-reasoning-as"
REASONING_FORMATS = ("field", "tags")

DEFAULT_TOKENS = 8
# How long a stall (`x-fake-stall`, `x-fake-hold-after`) lasts when the client stays.
STALL_S = 600.0
# The fixed arguments of an injected tool call, streamed in these fragments; each fragment counts
# as one completion token.
TOOL_ARGUMENT_FRAGMENTS = ('{"x": ', "1}")


@dataclass(frozen=True, slots=True)
class Plan:
    tokens: int
    """Content tokens the response carries if nothing is injected."""
    finish_reason: str
    first_token_delay_s: float
    token_delay_s: float
    fail_after: int | None
    error_event_after: int | None
    stall: bool
    tool_call: str | None
    hold_after: int | None = None
    """A stream holds after this many tokens until the client leaves (`x-fake-hold-after`)."""
    reasoning: int = 0
    """The first `reasoning` tokens (of `tokens`) are reasoning, not the answer."""
    reasoning_as: str = "field"
    """`field`: sent as `reasoning_content`; `tags`: in the content, inside `<think>…</think>`."""

    @property
    def failure_at(self) -> int | None:
        """Tokens sent before an injected failure; None when the generation succeeds."""
        after = self.fail_after if self.fail_after is not None else self.error_event_after
        return None if after is None else min(after, self.tokens)

    def holds_at(self, sent: int) -> bool:
        """Whether the stream holds once `sent` token chunks are out: after min(N, tokens)."""
        return self.hold_after is not None and sent == min(self.hold_after, self.tokens_to_send)

    @property
    def tokens_to_send(self) -> int:
        failure_at = self.failure_at
        return self.tokens if failure_at is None else failure_at


def header_int(headers: Mapping[str, str], name: str) -> int | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        value = -1
    if value < 0:
        raise bad_request(f"header {name} must be a non-negative integer, got {raw!r}", name)
    return value


def injected_status(headers: Mapping[str, str]) -> RequestError | None:
    status = header_int(headers, H_STATUS)
    if status is None:
        return None
    if not 400 <= status <= 599:
        raise bad_request(f"header {H_STATUS} must be an error status (400-599)", H_STATUS)
    return RequestError(status, f"fake worker: injected status {status}")


def _max_tokens(body: Mapping[str, Any]) -> int | None:
    # vLLM prefers the newer name when both are given.
    for field in ("max_completion_tokens", "max_tokens"):
        value = body.get(field)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise bad_request(f"{field} must be a positive integer", field)
        return value
    return None


def _tool_names(body: Mapping[str, Any]) -> set[str]:
    tools = body.get("tools")
    names: set[str] = set()
    if isinstance(tools, list):
        for tool in tools:
            function = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                names.add(function["name"])
    return names


def make_plan(headers: Mapping[str, str], body: Mapping[str, Any], *, chat: bool) -> Plan:
    requested = header_int(headers, H_TOKENS)
    tokens = DEFAULT_TOKENS if requested is None else requested
    finish_reason = "stop"
    cap = _max_tokens(body)
    if cap is not None and cap < tokens:
        tokens, finish_reason = cap, "length"
    tool = headers.get(H_TOOL_CALL)
    tool_call = tool if chat and tool is not None and tool in _tool_names(body) else None
    if tool_call is not None:
        tokens, finish_reason = len(TOOL_ARGUMENT_FRAGMENTS), "tool_calls"
    reasoning_as = headers.get(H_REASONING_AS, "field").strip().lower()
    if reasoning_as not in REASONING_FORMATS:
        raise bad_request(
            f"header {H_REASONING_AS} must be one of {', '.join(REASONING_FORMATS)}", H_REASONING_AS
        )
    return Plan(
        tokens=tokens,
        finish_reason=finish_reason,
        first_token_delay_s=(header_int(headers, H_FIRST_TOKEN_DELAY) or 0) / 1000,
        token_delay_s=(header_int(headers, H_TOKEN_DELAY) or 0) / 1000,
        fail_after=header_int(headers, H_FAIL_AFTER),
        error_event_after=header_int(headers, H_ERROR_EVENT_AFTER),
        stall=headers.get(H_STALL, "0").strip().lower() not in ("", "0", "false", "no"),
        tool_call=tool_call,
        hold_after=header_int(headers, H_HOLD_AFTER),
        reasoning=0
        if tool_call is not None or not chat
        else min(header_int(headers, H_REASONING) or 0, tokens),
        reasoning_as=reasoning_as,
    )


def _words(text: Any) -> int:
    return len(text.split()) if isinstance(text, str) else 0


def chat_prompt_tokens(body: Mapping[str, Any]) -> int:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty list", "messages")
    words = 0
    for message in messages:
        if not isinstance(message, dict):
            raise bad_request("each message must be an object", "messages")
        content = message.get("content")
        if isinstance(content, list):
            words += sum(
                _words(part.get("text"))
                for part in content
                if isinstance(part, dict) and part.get("type") == "text"
            )
        elif content is None or isinstance(content, str):
            words += _words(content)
        else:
            raise bad_request("message content must be a string or a list of parts", "messages")
    return max(words, 1)


def string_list(body: Mapping[str, Any], field: str) -> list[str]:
    value = body.get(field)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        return value
    raise bad_request(f"{field} must be a string or a non-empty list of strings", field)


def completion_prompt_tokens(body: Mapping[str, Any]) -> int:
    return max(sum(_words(prompt) for prompt in string_list(body, "prompt")), 1)
