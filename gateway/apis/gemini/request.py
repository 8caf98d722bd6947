"""A Gemini `generateContent` request, checked and translated to the worker's OpenAI chat body.
The model and whether it streams come from the path (routes), never from the body.

    systemInstruction {parts: [{text}]}   -> the first message, role "system" (chat_shape folds it)
    contents[i] role user (or function)   -> tool messages (functionResponse parts), then one user
                                             message (text, inlineData/fileData images)
                role model                -> one assistant message: text, `tool_calls` from
                                             functionCall parts (args object -> arguments JSON);
                                             thought parts dropped (chat workers take no reasoning)
    tools, toolConfig                     -> gateway.apis.gemini.tools
    generationConfig                      -> gateway.apis.gemini.generation

A functionCall without an `id` gets `call_<i>_<j>` from its place, the same on every turn, so the
prompt's prefix stays cacheable; a functionResponse answers the call with its id, else the
earliest unanswered call of its name; the same response twice in one turn is sent once.

Tolerant to shapes, as the other translations: unknown fields and parts are dropped and named in
`ignored` (gateway.proxy.translation.ignored), never refused; `cachedContent` is refused (a clear
400: the answer would silently lack the cached prompt). Protobuf JSON's snake_case spellings are
read too. A refusal is a 400 naming the field, for a shape that is wrong rather than unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.apis.gemini.fields import camel, get
from gateway.apis.gemini.generation import generation
from gateway.apis.gemini.tools import functions as tool_functions
from gateway.apis.gemini.tools import tool_config
from gateway.proxy.translation.body import dumps, field_error
from gateway.proxy.translation.chat_shape import fold_chat
from gateway.proxy.translation.ignored import Dropped

# Top-level fields the translation reads (the rest is dropped and listed).
_HANDLED = frozenset({"contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "model"})
_USER_ROLES = ("user", "function", "tool")


@dataclass(frozen=True, slots=True)
class Translated:
    chat: dict[str, Any]  # the chat body, less `model`, `stream` and the stream options
    model: str
    max_tokens: int | None
    candidates: int
    include_thoughts: bool
    prompt_estimate: int  # ~4 characters a token, over everything the prompt is made of
    ignored: tuple[str, ...] = ()


def translate(body: dict[str, Any], model: str) -> Translated:
    if get(body, "cachedContent") is not None:
        raise field_error("cachedContent", "is not supported by this gateway: send the content itself")
    dropped = Dropped()
    system = get(body, "systemInstruction")
    messages = _system(system)
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise field_error("contents", "must be a non-empty list of contents")
    messages.extend(_Conversation(dropped).messages(contents))
    if not any(m["role"] != "system" for m in messages):
        raise field_error("contents", "has no user or model content a worker could answer")
    chat: dict[str, Any] = {"messages": fold_chat(messages)}
    tools = get(body, "tools")
    functions = tool_functions(tools, dropped)
    config = get(body, "toolConfig")
    if config is not None:
        functions = tool_config(config, functions, chat, dropped)
    if functions:
        chat["tools"] = functions
    max_tokens, candidates, include_thoughts = generation(get(body, "generationConfig"), chat, dropped)
    for name in body:
        if camel(name) not in _HANDLED:
            dropped.add(camel(name))
    return Translated(
        chat=chat,
        model=model,
        max_tokens=max_tokens,
        candidates=candidates,
        include_thoughts=include_thoughts,
        prompt_estimate=max(1, len(dumps([system, contents, tools])) // 4),
        ignored=dropped.done(),
    )


def _text_parts(content: Any, param: str) -> str:
    """The text of a Content (or a bare string): `systemInstruction`'s shape."""
    if isinstance(content, str):
        return content
    if not isinstance(content, dict):
        raise field_error(param, "must be a Content object with 'parts'")
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise field_error(f"{param}.parts", "must be a list of parts")
    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "\n".join(texts)


def _system(system: Any) -> list[dict[str, Any]]:
    if system is None:
        return []
    text = _text_parts(system, "systemInstruction")
    return [{"role": "system", "content": text}] if text else []


class _Conversation:
    """`contents` as chat messages, pairing function responses with the calls they answer."""

    __slots__ = ("_dropped", "_unanswered")

    def __init__(self, dropped: Dropped) -> None:
        self._dropped = dropped
        self._unanswered: list[tuple[str, str]] = []  # (call id, name), in the order made

    def messages(self, contents: list[Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i, content in enumerate(contents):
            param = f"contents[{i}]"
            if not isinstance(content, dict):
                raise field_error(param, "must be an object")
            role = content.get("role") or "user"  # a single-turn request may leave it out
            parts = content.get("parts")
            if not isinstance(parts, list):
                raise field_error(f"{param}.parts", "must be a list of parts")
            if role == "model":
                out.append(self._model(parts, i))
            elif role in _USER_ROLES:
                out.extend(self._user(parts, i))
            else:
                shown = repr(role)[:40] if isinstance(role, str) else "not a string"
                raise field_error(f"{param}.role", f"is {shown}: it must be 'user' or 'model'")
        return out

    def _model(self, parts: list[Any], i: int) -> dict[str, Any]:
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for j, part in enumerate(parts):
            where = f"contents[{i}].parts[{j}]"
            if not isinstance(part, dict):
                raise field_error(where, "must be an object")
            call = get(part, "functionCall")
            if part.get("thought") is True:
                continue  # reasoning: a chat worker takes none as input
            if isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif call is not None:
                calls.append(self._call(call, f"{where}.functionCall", f"call_{i}_{j}"))
            else:
                self._dropped.add(where, _kind(part))
        text = "".join(texts)
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = calls
        elif not text:
            message["content"] = ""
        return message

    def _call(self, call: Any, param: str, default_id: str) -> dict[str, Any]:
        if not isinstance(call, dict):
            raise field_error(param, "must be an object")
        name, args, call_id = call.get("name"), call.get("args", {}), call.get("id")
        if not isinstance(name, str) or not name:
            raise field_error(f"{param}.name", "must be a non-empty string")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise field_error(f"{param}.args", "must be an object")
        call_id = call_id if isinstance(call_id, str) and call_id else default_id
        self._unanswered.append((call_id, name))
        function = {"name": name, "arguments": dumps(args).decode()}
        return {"id": call_id, "type": "function", "function": function}

    def _user(self, parts: list[Any], i: int) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for j, part in enumerate(parts):
            where = f"contents[{i}].parts[{j}]"
            if not isinstance(part, dict):
                raise field_error(where, "must be an object")
            response = get(part, "functionResponse")
            media = get(part, "inlineData") or get(part, "fileData")
            if isinstance(part.get("text"), str):
                content.append({"type": "text", "text": part["text"]})
            elif response is not None:
                result = self._result(response, f"{where}.functionResponse", f"call_{i}_{j}")
                if result in results:
                    # Gemini CLI 0.61 resumes a session with a call's response twice: one answer
                    # per call is what chat templates take.
                    self._dropped.add(where, "functionResponse")
                else:
                    results.append(result)
            elif isinstance(media, dict) and _image_url(media) is not None:
                content.append({"type": "image_url", "image_url": {"url": _image_url(media)}})
            else:
                self._dropped.add(where, _kind(part))
        # Function responses answer the model's calls, so they come straight after them.
        return [*results, {"role": "user", "content": content}] if content else results

    def _result(self, response: Any, param: str, default_id: str) -> dict[str, Any]:
        if not isinstance(response, dict):
            raise field_error(param, "must be an object")
        name, call_id, value = response.get("name"), response.get("id"), response.get("response", {})
        if not isinstance(name, str) or not name:
            raise field_error(f"{param}.name", "must be a non-empty string")
        if not isinstance(call_id, str) or not call_id:
            call_id = next((c for c, n in self._unanswered if n == name), default_id)
        self._unanswered = [(c, n) for c, n in self._unanswered if c != call_id]
        return {"role": "tool", "tool_call_id": call_id, "content": _result_text(value)}


def _kind(part: dict[str, Any]) -> str:
    """What a dropped part is, by its data field (`executableCode`, `videoMetadata`...)."""
    names = [camel(k) for k in part if k not in ("thought", "thoughtSignature", "thought_signature")]
    return names[0] if names else "empty"


def _image_url(media: dict[str, Any]) -> str | None:
    """An image part's URL (a data: URL for inline bytes); None for what a chat worker cannot see."""
    mime = get(media, "mimeType")
    if not isinstance(mime, str) or not mime.startswith("image/"):
        return None
    data, uri = media.get("data"), get(media, "fileUri")
    if isinstance(data, str) and data:
        return f"data:{mime};base64,{data}"
    return uri if isinstance(uri, str) and uri else None


def _result_text(value: Any) -> str:
    """A function's response as a tool message's text: the text itself when the response is one
    text field (Gemini CLI sends `{"output": "..."}`), else its JSON."""
    if isinstance(value, dict) and len(value) == 1:
        ((key, inner),) = value.items()
        if isinstance(inner, str) and key in ("output", "content", "result"):
            return inner
        if isinstance(inner, str) and key == "error":
            return f"Error: {inner}"  # the chat contract has no error flag: the model reads it
    return dumps(value).decode()
