"""Scripted coding-agent turns: the fake worker plays the model of a real agent's tool round trip.

The tests in tests/agents drive real coding agents (Claude Code, Codex, opencode) through the
gateway; the worker decides from what the request contains, never from headers (an agent run with
default settings sends none of ours), so the same script works on chat (translated pools) and on the
native Messages and Responses routes.

The "trailing" part of a conversation is what follows its last assistant output (the new user turn,
or the tool results the agent sends back). The script, in order:
- A tool result in the trailing part: answer text, `tool said: <the result's first words>`, so the
  test sees that the result came back.
- `sluicegate-read:<path>` in the trailing part's text and a read-only tool among the request's
  tools (Claude Code `Read`, opencode `read`, Codex `exec_command` / `shell`, Gemini CLI
  `read_file`): call it on <path>.
- `sluicegate-recall:<word>` in the trailing part's text: answer `recall <word> seen` when <word>
  occurs earlier in the conversation, else `recall <word> missing` (a continued session resends it).
- Anything else: not scripted; the route answers as it always does.

Scripted answers ignore the `x-fake-*` programming and the model name (an agent's side requests
ask for its own model names; the gateway's aliases are what the tests check). Token model: the
prompt is the words of every text-like string of the conversation (at least 1); the answer's tokens
are the words of its text, or of the tool call's arguments JSON.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from workers.common import framing
from workers.common.framing import ChatFrames
from workers.fake import messages as anthropic
from workers.fake import responses as openai_responses

if TYPE_CHECKING:
    from workers.fake.app import FakeWorker

JSONObject = dict[str, Any]
Dialect = Literal["chat", "messages", "responses"]

READ_MARKER = re.compile(r"sluicegate-read:([^\s\"'<>]+)")
RECALL_MARKER = re.compile(r"sluicegate-recall:([A-Za-z0-9_-]+)")
# Enough of a tool result to prove it came back, short enough for one line of an agent's output.
ECHO_WORDS = 24
_TEXT_KEYS = frozenset({"text", "content", "output", "arguments", "system", "instructions", "input"})


def _read_arguments(name: str, path: str) -> JSONObject | None:
    """The arguments of a read-only call of tool `name` on `path`; None for a tool we do not drive."""
    if name == "Read":
        return {"file_path": path}
    if name == "read":
        return {"filePath": path}
    if name == "exec_command":
        return {"cmd": f"cat {path}"}
    if name == "shell":
        return {"command": ["cat", path]}
    if name == "read_file":  # Gemini CLI's
        return {"file_path": path}
    return None


@dataclass(frozen=True, slots=True)
class Turn:
    """What the script answers: text, or one tool call."""

    text: str | None = None
    tool: str | None = None
    arguments: str = ""
    call_id: str = ""

    @property
    def output_tokens(self) -> int:
        return max(len((self.text if self.text is not None else self.arguments).split()), 1)


def _strings(value: Any, key: str | None = None) -> Iterator[str]:
    """Every text-like string under `value` (values of text/content/output/... keys, list items)."""
    if isinstance(value, str):
        if key is None or key in _TEXT_KEYS:
            yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item, key)
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, str):
                if k in _TEXT_KEYS:
                    yield v
            else:
                yield from _strings(v, k)


def prompt_tokens(body: JSONObject) -> int:
    fields = ("system", "instructions", "messages", "input")
    return max(sum(len(s.split()) for f in fields for s in _strings(body.get(f), None)), 1)


@dataclass(frozen=True, slots=True)
class Conversation:
    """A request's conversation, split where its last assistant output ends."""

    earlier: list[Any]
    trailing_text: str
    tool_result: str | None
    tools: tuple[str, ...]


def _is_assistant(dialect: Dialect, item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    if dialect == "responses" and item.get("type") in ("function_call", "reasoning", "custom_tool_call"):
        return True
    return item.get("role") == "assistant"


def _tool_result(dialect: Dialect, trailing: list[Any]) -> str | None:
    for item in trailing:
        if not isinstance(item, dict):
            continue
        if dialect == "chat" and item.get("role") == "tool":
            return " ".join(_strings(item.get("content"), None))
        if dialect == "responses" and item.get("type") in ("function_call_output", "custom_tool_call_output"):
            return " ".join(_strings(item.get("output"), None))
        if dialect == "messages" and isinstance(item.get("content"), list):
            for block in item["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    return " ".join(_strings(block.get("content"), None))
    return None


def _tool_names(dialect: Dialect, body: JSONObject) -> tuple[str, ...]:
    names = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        holder = tool.get("function") if dialect == "chat" else tool
        if isinstance(holder, dict) and isinstance(holder.get("name"), str):
            names.append(holder["name"])
    return tuple(names)


def conversation(dialect: Dialect, body: JSONObject) -> Conversation | None:
    items = body.get("input" if dialect == "responses" else "messages")
    if dialect == "responses" and isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        return None
    last = max((i for i, item in enumerate(items) if _is_assistant(dialect, item)), default=-1)
    earlier, trailing = items[: last + 1], items[last + 1 :]
    trailing_text = " ".join(_strings(trailing, None))
    return Conversation(earlier, trailing_text, _tool_result(dialect, trailing), _tool_names(dialect, body))


def decide(dialect: Dialect, body: JSONObject) -> Turn | None:
    """The scripted answer to `body`, or None when the script has nothing to say about it."""
    talk = conversation(dialect, body)
    if talk is None:
        return None
    if talk.tool_result is not None and READ_MARKER.search(" ".join(_strings(talk.earlier, None))):
        words = talk.tool_result.split()[:ECHO_WORDS]
        return Turn(text="tool said: " + " ".join(words))
    read = READ_MARKER.search(talk.trailing_text)
    if read is not None and talk.tool_result is None:
        for name in talk.tools:
            arguments = _read_arguments(name, read.group(1))
            if arguments is not None:
                call_id = f"call_{uuid.uuid4().hex[:24]}"
                return Turn(tool=name, arguments=orjson.dumps(arguments).decode(), call_id=call_id)
    recall = RECALL_MARKER.search(talk.trailing_text)
    if recall is not None:
        word = recall.group(1)
        system = " ".join(_strings([body.get("system"), body.get("instructions")], None))
        seen = word in " ".join(_strings(talk.earlier, None)) or word in system
        return Turn(text=f"recall {word} {'seen' if seen else 'missing'}")
    return None


# --- the answers, in each dialect ----------------------------------------------------------------


def _chat(turn: Turn, model: str, prompt: int, body: JSONObject) -> tuple[bytes, list[bytes]]:
    response_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    finish = "stop" if turn.tool is None else "tool_calls"
    message: JSONObject = {"role": "assistant", "content": turn.text, "tool_calls": []}
    if turn.tool is not None:
        function = {"name": turn.tool, "arguments": turn.arguments}
        message["tool_calls"] = [{"id": turn.call_id, "type": "function", "function": function}]
    whole = framing.chat_completion(response_id, created, model, message, finish, prompt, turn.output_tokens)
    frames = ChatFrames(response_id, created, model)
    events = [frames.role()]
    if turn.tool is not None:
        events.append(frames.tool_call_start(turn.call_id, turn.tool, generated=0))
        events.append(frames.tool_call_arguments(turn.arguments, finish, generated=turn.output_tokens))
    else:
        events.append(frames.last_token(turn.text or "", finish, generated=turn.output_tokens))
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        events.append(frames.usage_chunk(prompt, turn.output_tokens))
    events.append(framing.SSE_DONE)
    return whole, events


def _messages(turn: Turn, model: str, prompt: int) -> tuple[bytes, list[bytes]]:
    message_id = f"chatcmpl-{uuid.uuid4().hex[:16]}"
    stop = "end_turn" if turn.tool is None else "tool_use"
    usage = {"input_tokens": prompt, "output_tokens": turn.output_tokens}
    if turn.tool is None:
        block: JSONObject = {"type": "text", "text": turn.text}
        start: JSONObject = {"type": "text", "text": ""}
        delta: JSONObject = {"type": "text_delta", "text": turn.text}
    else:
        block = {
            "type": "tool_use",
            "id": turn.call_id,
            "name": turn.tool,
            "input": orjson.loads(turn.arguments),
        }
        start = {**block, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": turn.arguments}
    head = {"id": message_id, "type": "message", "role": "assistant", "model": model}
    whole = orjson.dumps({**head, "content": [block], "stop_reason": stop, "usage": usage})
    opening: JSONObject = {**head, "content": [], "stop_reason": None, "stop_sequence": None}
    opening["usage"] = {"input_tokens": prompt, "output_tokens": 0}
    event = anthropic.sse_event
    events = [
        event("message_start", {"type": "message_start", "message": opening}),
        event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": start}),
        event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        event(
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": usage},
        ),
        event("message_stop", {"type": "message_stop"}),
    ]
    return whole, events


def _responses(turn: Turn, model: str, prompt: int, body: JSONObject) -> tuple[bytes, list[bytes]]:
    item_id = f"{'msg' if turn.tool is None else 'fc'}_{uuid.uuid4().hex[:16]}"
    if turn.tool is None:
        part: JSONObject = {"annotations": [], "text": turn.text, "type": "output_text", "logprobs": None}
        item: JSONObject = {"id": item_id, "type": "message", "role": "assistant", "status": "completed"}
        item["content"] = [part]
    else:
        item = {"id": item_id, "type": "function_call", "status": "completed", "call_id": turn.call_id}
        item.update(name=turn.tool, arguments=turn.arguments)
    created = {
        "id": f"resp_{uuid.uuid4().hex[:16]}",
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "in_progress",
        "output": [],
        "usage": None,
        "tools": body.get("tools") or [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "tool_choice": body.get("tool_choice", "auto"),
        "error": None,
        "incomplete_details": None,
    }
    usage = openai_responses._usage(prompt, turn.output_tokens)
    done = {**created, "status": "completed", "output": [item], "usage": usage}
    sequence = iter(range(1_000))

    def event(kind: str, **fields: Any) -> bytes:
        return openai_responses.sse_event({"type": kind, "sequence_number": next(sequence), **fields})

    added = {**item, "status": "in_progress"}
    events = [event("response.created", response=created), event("response.in_progress", response=created)]
    if turn.tool is None:
        added["content"] = []
        index = {"item_id": item_id, "output_index": 0, "content_index": 0}
        empty = {**part, "text": ""}
        events += [
            event("response.output_item.added", output_index=0, item=added),
            event("response.content_part.added", **index, part=empty),
            event("response.output_text.delta", **index, delta=turn.text, logprobs=[]),
            event("response.output_text.done", **index, text=turn.text, logprobs=[]),
            event("response.content_part.done", **index, part=part),
        ]
    else:
        added["arguments"] = ""
        index = {"item_id": item_id, "output_index": 0}
        events += [
            event("response.output_item.added", output_index=0, item=added),
            event("response.function_call_arguments.delta", **index, delta=turn.arguments),
            event("response.function_call_arguments.done", **index, arguments=turn.arguments),
        ]
    events += [
        event("response.output_item.done", output_index=0, item=item),
        event("response.completed", response=done),
    ]
    return orjson.dumps(done), events


def render(dialect: Dialect, turn: Turn, model: str, body: JSONObject) -> tuple[bytes, list[bytes]]:
    """The whole answer and the stream's events of `turn` in `dialect`."""
    prompt = prompt_tokens(body)
    if dialect == "chat":
        return _chat(turn, model, prompt, body)
    if dialect == "messages":
        return _messages(turn, model, prompt)
    return _responses(turn, model, prompt, body)


def scripted(
    worker: FakeWorker, dialect: Dialect, route: Callable[[Request], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    """`route`, answering scripted agent turns itself (and recording them as every request is)."""

    async def endpoint(request: Request) -> Response:
        try:
            raw = await request.body()  # cached on the request: `route` reads it again
            body = orjson.loads(raw) if raw else None
        except (ClientDisconnect, orjson.JSONDecodeError):
            body = None
        turn = decide(dialect, body) if isinstance(body, dict) else None
        if turn is None or body is None:
            return await route(request)
        record = await worker.intake(request)
        if record is None:
            return worker.gone()
        model = body.get("model") if isinstance(body.get("model"), str) else worker.model_names[0]
        whole, events = render(dialect, turn, model, body)
        record.tokens_sent = turn.output_tokens
        record.finish("completed", 200)
        headers = {"x-request-id": record.request_id}
        if body.get("stream") is not True:
            return Response(whole, media_type="application/json", headers=headers)
        return Response(b"".join(events), media_type=framing.SSE_CONTENT_TYPE, headers=headers)

    return endpoint
