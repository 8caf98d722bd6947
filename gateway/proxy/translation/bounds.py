"""How many messages, content parts and tools one request body may hold, checked right after the
body is opened and before anything walks it.

The byte limit alone does not bound the work: 8.7 MB of 240,000 short messages cost 0.3-0.6 s of
event-loop time per request to translate, and parsing in a thread would not free the loop (the
JSON parser holds the GIL). Counting the lists is cheap; the defaults are far above any real
agent's request. The fields are each API's own, declared with it (gateway.apis: its
`body_lists`, a `BodyLists`), e.g. Messages' `messages`, each message's `content` and `tools`, or
Gemini's `contents`, `parts` and `tools` with their `functionDeclarations`; the pipeline hands each
dialect the bounds with its API's lists.

Those counts come after the parse, and the parse itself is the larger cost: orjson holds the loop
0.15-0.4 s for 240,000 messages, 0.7 s for 100,001 Gemini `contents`. So before it, a body over
`max_values` bytes has its JSON values estimated from its bytes (`check_values`: objects, arrays
and strings, each `{`, `[` and pair of `"`; a few milliseconds a megabyte, in C) and is refused
with a 413 past `max_values` (200,000: a parse of that many costs the loop tens of milliseconds).
The estimate counts those bytes inside strings too, so it never counts fewer values than the
parse would make; a real prompt reaches the bound only with megabytes of brace- and quote-dense
text, beyond any model's context window."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.errors import ErrorCode, GatewayError


@dataclass(frozen=True, slots=True)
class BodyLists:
    """The list fields of one API's bodies that `check_bounds` counts.

    items          top-level lists of messages (or items), each counted against `max_messages`
    parts          in each of those that is an object: its lists of content parts (`max_parts`)
    tools          top-level lists of tools, counted together against `max_tools`
    tool_groups    in a tool that is an object: a list that holds several tools (Gemini's
                   `functionDeclarations`), each of which counts; else the tool counts once
    """

    items: tuple[str, ...] = ()
    parts: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    tool_groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BodyBounds:
    max_messages: int = 20_000  # SLUICEGATE_MAX_MESSAGES
    max_parts: int = 2_000  # SLUICEGATE_MAX_CONTENT_PARTS: in one message
    max_tools: int = 2_000  # SLUICEGATE_MAX_TOOLS
    max_values: int = 200_000  # SLUICEGATE_MAX_BODY_VALUES: JSON values, estimated before the parse
    lists: BodyLists = BodyLists()  # the API's fields these count (none: only `max_values` holds)


DEFAULT_BOUNDS = BodyBounds()


def _over(param: str, count: int, limit: int, what: str) -> GatewayError:
    return GatewayError(
        ErrorCode.INVALID_REQUEST,
        f"'{param}' holds {count} {what}; this gateway takes at most {limit} in one request.",
        param=param,
    )


# Bytes counted at a time by `check_values`, which stops at the first slice past the bound.
_COUNTED_AT_ONCE = 256 * 1024


def check_values(raw: bytes, max_values: int) -> None:
    """Refuses (413, in the API's envelope) a body whose JSON values, estimated from its bytes,
    pass `max_values`, before anything parses it. Each value counted takes a byte at least, so a
    body no longer than the bound is not counted at all."""
    if len(raw) <= max_values:
        return
    containers = quotes = 0
    # A slice at a time, so a body past the bound early (every attack) is not counted whole.
    for start in range(0, len(raw), _COUNTED_AT_ONCE):
        end = start + _COUNTED_AT_ONCE
        containers += raw.count(b"{", start, end) + raw.count(b"[", start, end)
        quotes += raw.count(b'"', start, end)
        if containers + quotes // 2 > max_values:
            break
    values = containers + quotes // 2
    if values > max_values:
        raise GatewayError(
            ErrorCode.REQUEST_TOO_LARGE,
            f"The request body holds more than {max_values} JSON values (objects, arrays and strings, "
            f"counted on its bytes); this gateway parses at most {max_values} in one request.",
        )


def check_bounds(payload: dict[str, Any], bounds: BodyBounds) -> None:
    """Refuses (400, in the API's envelope) a body with more messages, parts in one message or
    tools than `bounds` allow, in the fields its `lists` name. Shapes are not judged here: the
    dialect's own checks do that."""
    lists = bounds.lists
    for name in lists.items:
        items = payload.get(name)
        if not isinstance(items, list):
            continue
        if len(items) > bounds.max_messages:
            raise _over(name, len(items), bounds.max_messages, "items")
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                continue
            for part_name in lists.parts:
                parts = item.get(part_name)
                if isinstance(parts, list) and len(parts) > bounds.max_parts:
                    raise _over(f"{name}[{index}].{part_name}", len(parts), bounds.max_parts, "parts")
    for name in lists.tools:
        tools = payload.get(name)
        if isinstance(tools, list):
            count = _tools(tools, lists.tool_groups)
            if count > bounds.max_tools:
                raise _over(name, count, bounds.max_tools, "tools")


def _tools(tools: list[Any], groups: tuple[str, ...]) -> int:
    if not groups:
        return len(tools)
    count = 0
    for tool in tools:
        grouped: int | None = None  # a tool that is a group counts its members, none if empty
        if isinstance(tool, dict):
            for group in groups:
                declarations = tool.get(group)
                if isinstance(declarations, list):
                    grouped = (grouped or 0) + len(declarations)
        count += 1 if grouped is None else grouped
    return count
