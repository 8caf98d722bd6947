"""An Anthropic Messages request, checked and translated to the worker's OpenAI chat body.

    system (string | text blocks)          -> the first message, role "system"
    messages[i] role system (or developer) -> a system message, then folded (chat_shape): one
                                              leading system message, later ones into the
                                              adjacent user turn, in place
    user content: text, image              -> one user message (image_url parts: data: URL or URL)
                  document (text source)   -> text
                  tool_result              -> a "tool" message per result, before the user's own
    assistant content: text, tool_use      -> one assistant message with `tool_calls`
                       thinking            -> dropped: chat workers take no reasoning as input
    other content blocks (server_tool_use, web_search_tool_result, a PDF...) -> dropped, listed
    tools [{name, description, input_schema}] -> function tools (whatever their `type`, when they
          carry a schema); server tools without one (web_search_*, bash_*...) -> dropped, listed
    tool_choice auto | any | tool | none   -> auto | required | {function} | none
    stop_sequences -> stop, metadata.user_id -> user, thinking -> chat_template_kwargs.enable_thinking
    (adaptive reasons: enable_thinking true)

Tolerant to shapes: what the chat contract has no equivalent for (`output_config`,
`context_management`, `container`, `mcp_servers`, unknown fields, unknown blocks) is dropped and
named in `ignored` (gateway.proxy.translation.ignored), never refused. `cache_control` (with `ttl`)
is not listed: the engine's prefix cache does what it asks, unasked. A refusal is a 400 naming
the field, for a shape that is wrong rather than unknown (a tool_use without an id, a role that
is no role). `max_tokens` is required on /v1/messages, not on count_tokens (the same body otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.proxy.translation.body import dumps, field_error, model_of, open_body
from gateway.proxy.translation.bounds import BodyBounds, BodyLists, check_bounds
from gateway.proxy.translation.chat_shape import fold_chat
from gateway.proxy.translation.ignored import Dropped
from gateway.proxy.usage import MAX_TOKENS

# What the item bound counts (gateway.proxy.translation.bounds): the messages, each one's content
# blocks, the tools.
LISTS = BodyLists(items=("messages",), parts=("content",), tools=("tools",))
BOUNDS = BodyBounds(lists=LISTS)
_ROLES = ("user", "assistant")
# Roles that carry instructions: read as system messages wherever they are.
_SYSTEM_ROLES = ("system", "developer")
# Top-level fields the translation reads (the rest is dropped and listed).
_HANDLED = frozenset(
    {
        "model",
        "max_tokens",
        "messages",
        "system",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "tools",
        "tool_choice",
        "metadata",
        "thinking",
    }
)
_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
# Passed to the worker unchanged: the chat contract has the same field under the same meaning.
_SAMPLING = (("temperature", float), ("top_p", float), ("top_k", int))


@dataclass(frozen=True, slots=True)
class Translated:
    chat: dict[str, Any]  # the chat body, less `model` and the stream options
    model: str
    stream: bool
    max_tokens: int | None
    stop_sequences: tuple[str, ...]
    user: str | None
    prompt_estimate: int  # ~4 characters a token, over everything the prompt is made of
    ignored: tuple[str, ...] = ()  # what had no equivalent and was dropped (ignored.Dropped)


def translate(raw: bytes, *, needs_max_tokens: bool = True, bounds: BodyBounds = BOUNDS) -> Translated:
    body = open_body(raw)
    check_bounds(body, bounds)
    model = model_of(body)
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        if needs_max_tokens:
            raise field_error("max_tokens", "is required")
    elif not _is_int(max_tokens) or not 1 <= max_tokens <= MAX_TOKENS:
        raise field_error("max_tokens", f"must be an integer from 1 to {MAX_TOKENS}")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise field_error("stream", "must be a boolean")

    dropped = Dropped()
    messages = _system(body.get("system"))
    conversation = body.get("messages")
    if not isinstance(conversation, list) or not conversation:
        raise field_error("messages", "must be a non-empty list of messages")
    for i, message in enumerate(conversation):
        messages.extend(_message(message, f"messages[{i}]", dropped))
    if not any(m["role"] != "system" for m in messages):
        raise field_error("messages", "has no user or assistant content a worker could answer")
    messages = fold_chat(messages)

    chat: dict[str, Any] = {"messages": messages}
    if max_tokens is not None:
        chat["max_tokens"] = max_tokens
    for name, kind in _SAMPLING:
        value = body.get(name)
        if value is None:
            continue
        ok = _is_int(value) if kind is int else _is_number(value)
        if not ok:
            raise field_error(name, "must be a number" if kind is float else "must be an integer")
        chat[name] = value
    stops = _stop_sequences(body.get("stop_sequences"))
    if stops:
        chat["stop"] = list(stops)
    tools = body.get("tools")
    if tools is not None:
        functions = _tools(tools, dropped)
        if functions:
            chat["tools"] = functions
    choice = body.get("tool_choice")
    if choice is not None:
        chat.update(_tool_choice(choice))
    user = _user(body.get("metadata"))
    if user is not None:
        chat["user"] = user
    thinking = body.get("thinking")
    if thinking is not None:
        chat["chat_template_kwargs"] = {"enable_thinking": _thinking(thinking)}
    dropped.fields(body, _HANDLED)
    estimate_of = [body.get("system"), conversation, tools]
    return Translated(
        chat=chat,
        model=model,
        stream=bool(stream),
        max_tokens=max_tokens,
        stop_sequences=stops,
        user=user,
        prompt_estimate=max(1, len(dumps(estimate_of)) // 4),
        ignored=dropped.done(),
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value  # not NaN


def _text_of(blocks: Any, param: str) -> str:
    """A string, or text blocks joined: the shape of `system` and of a tool result."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise field_error(param, "must be a string or a list of text blocks")
    parts = []
    for i, block in enumerate(blocks):
        if (
            not isinstance(block, dict)
            or block.get("type") != "text"
            or not isinstance(block.get("text"), str)
        ):
            raise field_error(f"{param}[{i}]", "must be a text block with a string 'text'")
        parts.append(block["text"])
    return "\n".join(parts)


def _system(system: Any) -> list[dict[str, Any]]:
    if system is None:
        return []
    text = _text_of(system, "system")
    return [{"role": "system", "content": text}] if text else []


def _image(block: dict[str, Any], param: str) -> dict[str, Any]:
    source = block.get("source")
    if not isinstance(source, dict):
        raise field_error(f"{param}.source", "must be an object")
    kind = source.get("type")
    if kind == "base64":
        media, data = source.get("media_type"), source.get("data")
        if not isinstance(media, str) or not isinstance(data, str):
            raise field_error(f"{param}.source", "needs a string 'media_type' and 'data'")
        url = f"data:{media};base64,{data}"
    elif kind == "url":
        given = source.get("url")
        if not isinstance(given, str) or not given:
            raise field_error(f"{param}.source.url", "must be a non-empty string")
        url = given
    else:
        raise field_error(f"{param}.source.type", "must be 'base64' or 'url'")
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_result(
    block: dict[str, Any], param: str, dropped: Dropped
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The tool message, and the images of the result (a chat tool message carries text only:
    they follow as the user's own)."""
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise field_error(f"{param}.tool_use_id", "must be a non-empty string")
    content = block.get("content", "")
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for i, part in enumerate(content):
            where = f"{param}.content[{i}]"
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind == "image":
                images.append(_image(part, where))
            elif kind == "document" and _document_text(part) is not None:
                texts.append(_document_text(part) or "")
            else:
                dropped.add(where, kind)
    else:
        raise field_error(f"{param}.content", "must be a string or a list of blocks")
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool | None):
        raise field_error(f"{param}.is_error", "must be a boolean")
    text = "\n".join(texts)
    # The chat contract has no error flag on a tool message: the model reads it in the text.
    if is_error:
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": call_id, "content": text}, images


def _tool_use(block: dict[str, Any], param: str) -> dict[str, Any]:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input", {})
    if not isinstance(call_id, str) or not call_id:
        raise field_error(f"{param}.id", "must be a non-empty string")
    if not isinstance(name, str) or not name:
        raise field_error(f"{param}.name", "must be a non-empty string")
    if not isinstance(arguments, dict):
        raise field_error(f"{param}.input", "must be an object")
    function = {"name": name, "arguments": dumps(arguments).decode()}
    return {"id": call_id, "type": "function", "function": function}


def _document_text(block: dict[str, Any]) -> str | None:
    """A document block's text, when its source is plain text (a PDF or a file id is not)."""
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "text" and isinstance(source.get("data"), str):
        return str(source["data"])
    return None


def _message(message: Any, param: str, dropped: Dropped) -> list[dict[str, Any]]:
    if not isinstance(message, dict):
        raise field_error(param, "must be an object")
    role = message.get("role")
    if role in _SYSTEM_ROLES:
        text = _text_of(message.get("content"), f"{param}.content")
        return [{"role": "system", "content": text}] if text else []
    if role not in _ROLES:
        shown = repr(role)[:40] if isinstance(role, str) else "missing"
        raise field_error(f"{param}.role", f"is {shown}: it must be 'user', 'assistant' or 'system'")
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise field_error(f"{param}.content", "must be a string or a list of content blocks")
    parts: list[dict[str, Any]] = []
    tool_messages: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        where = f"{param}.content[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            if not isinstance(block.get("text"), str):
                raise field_error(f"{where}.text", "must be a string")
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image" and role == "user":
            parts.append(_image(block, where))
        elif kind == "document" and role == "user" and _document_text(block) is not None:
            parts.append({"type": "text", "text": _document_text(block)})
        elif kind == "tool_result" and role == "user":
            tool_message, images = _tool_result(block, where, dropped)
            tool_messages.append(tool_message)
            parts.extend(images)
        elif kind == "tool_use" and role == "assistant":
            calls.append(_tool_use(block, where))
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            continue
        else:
            # A server tool's use or result, a PDF, an image from the assistant: no chat equivalent.
            dropped.add(where, kind)
    if role == "assistant":
        text = "".join(part["text"] for part in parts)
        assistant: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            assistant["tool_calls"] = calls
        elif not text:
            assistant["content"] = ""
        return [assistant]
    # Tool results answer the assistant's calls, so they come straight after them.
    return [*tool_messages, {"role": "user", "content": parts}] if parts else tool_messages


def _stop_sequences(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise field_error("stop_sequences", "must be a list of non-empty strings")
    return tuple(value)


def _tools(tools: Any, dropped: Dropped) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise field_error("tools", "must be a list")
    out = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise field_error(where, "must be an object")
        kind = tool.get("type")
        if kind not in (None, "custom") and not isinstance(tool.get("input_schema"), dict):
            # A server tool (web_search_*), or one whose schema only Anthropic's models know
            # (bash_*, text_editor_*): the worker can run or call none of them.
            dropped.add(where, kind)
            continue
        name, schema, description = tool.get("name"), tool.get("input_schema"), tool.get("description")
        if not isinstance(name, str) or not name:
            raise field_error(f"{where}.name", "must be a non-empty string")
        if not isinstance(schema, dict):
            raise field_error(f"{where}.input_schema", "must be an object")
        function: dict[str, Any] = {"name": name, "parameters": schema}
        if description is not None:
            if not isinstance(description, str):
                raise field_error(f"{where}.description", "must be a string")
            function["description"] = description
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> dict[str, Any]:
    if not isinstance(choice, dict):
        raise field_error("tool_choice", "must be an object")
    kind = choice.get("type")
    out: dict[str, Any] = {}
    if kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise field_error("tool_choice.name", "must be a non-empty string")
        out["tool_choice"] = {"type": "function", "function": {"name": name}}
    elif isinstance(kind, str) and kind in _TOOL_CHOICES:
        out["tool_choice"] = _TOOL_CHOICES[kind]
    else:
        raise field_error("tool_choice.type", "must be 'auto', 'any', 'tool' or 'none'")
    disable = choice.get("disable_parallel_tool_use")
    if disable is not None:
        if not isinstance(disable, bool):
            raise field_error("tool_choice.disable_parallel_tool_use", "must be a boolean")
        out["parallel_tool_calls"] = not disable
    return out


def _user(metadata: Any) -> str | None:
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise field_error("metadata", "must be an object")
    user = metadata.get("user_id")
    if user is not None and not isinstance(user, str):
        raise field_error("metadata.user_id", "must be a string")
    return user or None


def _thinking(thinking: Any) -> bool:
    """Whether the worker's chat template should reason (Qwen3-style `enable_thinking`); the
    budget has no counterpart there and bounds nothing but `max_tokens`."""
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind not in ("enabled", "disabled", "adaptive"):
        raise field_error("thinking.type", "must be 'enabled', 'disabled' or 'adaptive'")
    # `display` (Claude Code sends "omitted") shapes Anthropic's own output only: nothing to map.
    budget = thinking.get("budget_tokens")
    if budget is not None and (not _is_int(budget) or budget < 0):
        raise field_error("thinking.budget_tokens", "must be a non-negative integer")
    return bool(kind != "disabled")
