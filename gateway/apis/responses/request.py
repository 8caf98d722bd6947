"""An OpenAI Responses request (`POST /v1/responses`) as the chat request a worker serves.

    input: a string                        -> one user message
    input items:
      {role, content}  (type "message")    -> a chat message (developer -> system); input_text /
                                              output_text parts -> text, input_image -> image_url;
                                              other parts dropped (listed in `ignored`)
      function_call {call_id, name, arguments[, namespace]}  -> an assistant message's tool_calls
                                              (consecutive calls join one message, as chat carries
                                              them; a namespaced one under its flat name)
      function_call_output {call_id, output}    -> a `role: tool` message
      reasoning                            -> dropped: chat workers take no reasoning back
      other item types (web_search_call, ...)   -> dropped, listed in `ignored`
    instructions, developer / system items -> system messages, then folded (chat_shape): one
                                              leading system message, later ones in place
    tools [{type: function, name, description, parameters, strict}] -> chat function tools;
          namespace tools flattened, hosted tools dropped (tool_names)
    tool_choice          -> auto | none | required | {type: function, function: {name}}
    max_output_tokens    -> max_tokens        temperature, top_p, parallel_tool_calls, user: as is
    text.format          -> response_format (json_schema, json_object)
    reasoning.effort     -> reasoning_effort (vLLM's switch for models that reason)

Translation is stateless: whatever needs a stored response (`previous_response_id`, `store:
true`, `conversation`, `background`, `item_reference` items) is refused with a 400 that names the
pool setting that will serve it. Fields the chat contract has no use for are accepted and
listed in `ignored` (`include`, `client_metadata`, `reasoning.summary`, unknown fields);
`prompt_cache_key` and `store: false` are accepted as they mean nothing else here.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import GatewayError
from gateway.proxy.translation import chat_shape
from gateway.proxy.translation.body import field_error
from gateway.proxy.translation.ignored import Dropped
from gateway.proxy.translation.tool_names import ToolNames, flatten, input_call
from gateway.proxy.usage import MAX_TOKENS

NATIVE_SETTING = "protocols: {responses: native}"
_CHAT_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TOOL_CHOICES = ("auto", "none", "required")
# Top-level fields the translation reads, or accepts as they are (the rest is listed as ignored).
HANDLED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "stream",
        "tools",
        "tool_choice",
        "temperature",
        "top_p",
        "parallel_tool_calls",
        "max_output_tokens",
        "text",
        "reasoning",
        "user",
        "metadata",
        "store",
        "background",
        "previous_response_id",
        "conversation",
        "prompt_cache_key",
    }
)
_STORED_ONLY = (
    ("previous_response_id", "continues a stored response"),
    ("conversation", "continues a stored conversation"),
)


def _stored_error(param: str, what: str) -> GatewayError:
    return field_error(
        param,
        f"{what}, and this model's pool translates the Responses API to chat completions, which "
        f"stores nothing. Stored responses need a pool configured with `{NATIVE_SETTING}`",
    )


def refuse_stateful(payload: dict[str, Any]) -> None:
    for name, what in _STORED_ONLY:
        if payload.get(name) is not None:
            raise _stored_error(name, what)
    for name, what in (
        ("store", "asks the gateway to keep the response"),
        ("background", "needs a stored response to poll"),
    ):
        value = payload.get(name)
        if value is True:
            raise _stored_error(name, what)
        if value is not None and value is not False:
            raise field_error(name, "must be a boolean")


def _text_of(content: Any, param: str, *, images: bool, dropped: Dropped) -> str | list[dict[str, Any]]:
    """A message's content: a string, or its parts in chat's shape (plain text when it is only
    text). A part chat cannot carry (a file, audio, an image where chat takes none) is dropped."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise field_error(param, "must be a string or a list of content parts")
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        where = f"{param}[{i}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text", "refusal"):
            assert isinstance(part, dict)
            text = part.get("refusal") if kind == "refusal" else part.get("text")
            if not isinstance(text, str):
                raise field_error(where, f"is a {kind} part without a string")
            parts.append({"type": "text", "text": text})
        elif kind == "input_image" and images:
            assert isinstance(part, dict)
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                raise field_error(where, "needs an 'image_url' (file ids need stored files)")
            image: dict[str, Any] = {"url": url}
            if isinstance(part.get("detail"), str):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            dropped.add(where, kind)
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _name(kind: Any) -> str:
    return repr(kind)[:60] if isinstance(kind, str) else "no 'type'"


def _tool_call(item: dict[str, Any], param: str) -> dict[str, Any]:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
    if not isinstance(call_id, str) or not call_id:
        raise field_error(f"{param}.call_id", "must be a non-empty string")
    if not isinstance(name, str) or not name:
        raise field_error(f"{param}.name", "must be a non-empty string")
    if not isinstance(arguments, str):
        raise field_error(f"{param}.arguments", "must be a string (JSON text)")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _tool_output(item: dict[str, Any], param: str, dropped: Dropped) -> dict[str, Any]:
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str) or not call_id:
        raise field_error(f"{param}.call_id", "must be a non-empty string")
    text = _text_of(output, f"{param}.output", images=False, dropped=dropped)
    assert isinstance(text, str)  # text-only parts join into one string
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def messages(payload: dict[str, Any], names: ToolNames, dropped: Dropped) -> list[dict[str, Any]]:
    """`instructions` and `input` as chat messages, system messages folded (chat_shape)."""
    return chat_shape.fold_chat(_messages(payload, names, dropped))


def _messages(payload: dict[str, Any], names: ToolNames, dropped: Dropped) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    instructions = payload.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise field_error("instructions", "must be a string")
        out.append({"role": "system", "content": instructions})
    value = payload.get("input")
    if isinstance(value, str):
        out.append({"role": "user", "content": value})
        return out
    if not isinstance(value, list) or not value:
        raise field_error("input", "is required: a string or a non-empty list of items")
    for i, item in enumerate(value):
        param = f"input[{i}]"
        if not isinstance(item, dict):
            raise field_error(param, "must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            given = item.get("role")
            role = _CHAT_ROLES.get(given) if isinstance(given, str) else None
            if role is None:
                raise field_error(
                    f"{param}.role",
                    f"is {_name(given)}, a role this gateway does not take: one of user, assistant, "
                    "system, developer",
                )
            images = role == "user"
            content = _text_of(item.get("content"), f"{param}.content", images=images, dropped=dropped)
            out.append({"role": role, "content": content})
        elif kind == "function_call":
            call = _tool_call(input_call(item, names), param)
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append(_tool_output(item, param, dropped))
        elif kind == "reasoning":
            continue
        elif kind == "item_reference":
            raise _stored_error(param, "refers to a stored item")
        else:
            # A hosted tool's call, an MCP listing...: nothing a chat worker can take back.
            dropped.add(param, kind)
    if not any(m["role"] != "system" for m in out):
        raise field_error("input", "has no message, call or result a worker could answer")
    return out


def tools(functions: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Responses function tools (flattened: tool_names.flatten) as chat function tools."""
    if functions is None:
        return None
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(functions):
        param = f"tools[{i}]"
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise field_error(f"{param}.name", "must be a non-empty string")
        function: dict[str, Any] = {"name": name}
        for key in ("description", "parameters", "strict"):
            if tool.get(key) is not None:
                function[key] = tool[key]
        if not isinstance(function.get("parameters", {}), dict):
            raise field_error(f"{param}.parameters", "must be a JSON schema object")
        out.append({"type": "function", "function": function})
    return out


def tool_choice(value: Any) -> Any:
    if value is None or value in _TOOL_CHOICES:
        return value
    if isinstance(value, dict) and value.get("type") == "function":
        name = value.get("name")
        if isinstance(name, str) and name:
            return {"type": "function", "function": {"name": name}}
    raise field_error("tool_choice", "must be auto, none, required or {type: function, name}")


def response_format(text: Any) -> dict[str, Any] | None:
    if text is None:
        return None
    if not isinstance(text, dict):
        raise field_error("text", "must be an object")
    fmt = text.get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        assert isinstance(fmt, dict)
        name, schema = fmt.get("name"), fmt.get("schema")
        if not isinstance(name, str) or not name:
            raise field_error("text.format.name", "must be a non-empty string")
        if not isinstance(schema, dict):
            raise field_error("text.format.schema", "must be a JSON schema object")
        spec = {k: fmt[k] for k in ("name", "description", "schema", "strict") if fmt.get(k) is not None}
        return {"type": "json_schema", "json_schema": spec}
    raise field_error("text.format.type", "must be text, json_object or json_schema")


def max_output_tokens(payload: dict[str, Any]) -> int | None:
    value = payload.get("max_output_tokens")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS:
        raise field_error("max_output_tokens", f"must be an integer from 1 to {MAX_TOKENS}")
    return value


def chat_fields(payload: dict[str, Any], dropped: Dropped) -> tuple[dict[str, Any], ToolNames]:
    """Every chat field but `model`, `messages` and the stream's: checked and translated; and the
    flat names of namespaced tools."""
    out: dict[str, Any] = {}
    for name in ("temperature", "top_p"):
        value = payload.get(name)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise field_error(name, "must be a number")
            out[name] = value
    parallel = payload.get("parallel_tool_calls")
    if parallel is not None:
        if not isinstance(parallel, bool):
            raise field_error("parallel_tool_calls", "must be a boolean")
        out["parallel_tool_calls"] = parallel
    cap = max_output_tokens(payload)
    if cap is not None:
        out["max_tokens"] = cap
    functions, names = flatten(payload.get("tools"), dropped)
    chat_tools = tools(functions)
    if chat_tools:
        out["tools"] = chat_tools
    choice = tool_choice(payload.get("tool_choice"))
    if choice is not None:
        out["tool_choice"] = choice
    fmt = response_format(payload.get("text"))
    if fmt is not None:
        out["response_format"] = fmt
    reasoning = payload.get("reasoning")
    if reasoning is not None:
        if not isinstance(reasoning, dict):
            raise field_error("reasoning", "must be an object")
        effort = reasoning.get("effort")
        if effort is not None:
            if not isinstance(effort, str):
                raise field_error("reasoning.effort", "must be a string")
            out["reasoning_effort"] = effort
        if reasoning.get("summary") is not None:
            dropped.add("reasoning.summary")  # a chat worker writes no summary of its reasoning
    user = payload.get("user")
    if user is not None:
        if not isinstance(user, str):
            raise field_error("user", "must be a string")
        out["user"] = user
    dropped.fields(payload, HANDLED)
    return out, names
