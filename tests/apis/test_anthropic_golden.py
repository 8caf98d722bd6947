"""Golden tables for the Anthropic Messages translation: worker chat chunks in, Messages events
out (every block and delta type, chunk boundaries inside `<think>` tags and inside tool-argument
JSON), whole answers, request bodies, and the error mapping. Pure functions: no server needed."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from gateway.apis.anthropic.dialect import MESSAGES
from gateway.apis.anthropic.errors import type_and_status
from gateway.apis.anthropic.request import translate
from gateway.apis.anthropic.stream import AnthropicStream
from gateway.errors import ErrorCode, GatewayError, WorkerRejected

MODEL = "claude-ish"
Event = tuple[str, dict[str, Any]]


def _stream(stop_sequences: tuple[str, ...] = ()) -> AnthropicStream:
    return AnthropicStream(message_id="msg_1", model=MODEL, prompt_estimate=9, stop_sequences=stop_sequences)


def _events(raw: bytes) -> list[Event]:
    out = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        head, data = block.split("\n")
        assert head.startswith("event: "), block
        assert data.startswith("data: "), block
        payload = json.loads(data[len("data: ") :])
        assert payload["type"] == head[len("event: ") :]
        out.append((payload["type"], payload))
    return out


def _run(chunks: list[dict[str, Any]], stream: AnthropicStream | None = None) -> list[Event]:
    stream = stream or _stream()
    raw = b"".join(stream.event(chunk, b"", b"") for chunk in chunks) + stream.done()
    return _events(raw)


def _delta(**delta: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def _finish(reason: str, matched: str | None = None, **delta: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": reason, "stop_reason": matched}]}


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


def _start(input_tokens: int = 9) -> Event:
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 0},
    }
    return ("message_start", {"type": "message_start", "message": message})


def _block(index: int, block: dict[str, Any]) -> Event:
    return ("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})


def _d(index: int, delta: dict[str, Any]) -> Event:
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def _text(index: int, text: str) -> Event:
    return _d(index, {"type": "text_delta", "text": text})


def _thinking(index: int, text: str) -> Event:
    return _d(index, {"type": "thinking_delta", "thinking": text})


def _stop(index: int) -> Event:
    return ("content_block_stop", {"type": "content_block_stop", "index": index})


def _end(reason: str, prompt: int, completion: int, sequence: str | None = None) -> list[Event]:
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": sequence},
        "usage": {"input_tokens": prompt, "output_tokens": completion},
    }
    return [("message_delta", delta), ("message_stop", {"type": "message_stop"})]


TEXT_BLOCK = {"type": "text", "text": ""}
THINKING_BLOCK = {"type": "thinking", "thinking": "", "signature": ""}

GOLDEN: dict[str, tuple[list[dict[str, Any]], list[Event]]] = {
    "text": (
        [
            _delta(role="assistant", content=""),
            _delta(content="Hi "),
            _finish("stop", content="there"),
            _usage(3, 2),
        ],
        [
            _start(),
            _block(0, TEXT_BLOCK),
            _text(0, "Hi "),
            _text(0, "there"),
            _stop(0),
            *_end("end_turn", 3, 2),
        ],
    ),
    "reasoning_content then text": (
        [
            _delta(reasoning_content="hmm "),
            _delta(reasoning_content="ok"),
            _delta(content="42"),
            _finish("stop"),
        ],
        [
            _start(),
            _block(0, THINKING_BLOCK),
            _thinking(0, "hmm "),
            _thinking(0, "ok"),
            _stop(0),
            _block(1, TEXT_BLOCK),
            _text(1, "42"),
            _stop(1),
            *_end("end_turn", 9, 0),
        ],
    ),
    "think tags split inside both tags": (
        [
            _delta(content="<thi"),
            _delta(content="nk>ab"),
            _delta(content="c</th"),
            _delta(content="ink>\n\nhel"),
            _delta(content="lo"),
        ],
        [
            _start(),
            _block(0, THINKING_BLOCK),
            _thinking(0, "ab"),
            _thinking(0, "c"),
            _stop(0),
            _block(1, TEXT_BLOCK),
            _text(1, "hel"),
            _text(1, "lo"),
            _stop(1),
            *_end("end_turn", 9, 0),
        ],
    ),
    "a think tag later in the text is text": (
        [_delta(content="I <think>"), _delta(content=" so")],
        [
            _start(),
            _block(0, TEXT_BLOCK),
            _text(0, "I <think>"),
            _text(0, " so"),
            _stop(0),
            *_end("end_turn", 9, 0),
        ],
    ),
    "an unfinished opening tag at the end is text": (
        [_delta(content="<thi")],
        [_start(), _block(0, TEXT_BLOCK), _text(0, "<thi"), _stop(0), *_end("end_turn", 9, 0)],
    ),
    "tool call arguments split inside the JSON": (
        [
            _delta(content="Let me look."),
            _delta(
                tool_calls=[
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get", "arguments": ""},
                    }
                ]
            ),
            _delta(tool_calls=[{"index": 0, "function": {"arguments": '{"ci'}}]),
            _delta(tool_calls=[{"index": 0, "function": {"arguments": 'ty": "Pa'}}]),
            _finish("tool_calls", tool_calls=[{"index": 0, "function": {"arguments": 'ris"}'}}]),
            _usage(5, 7),
        ],
        [
            _start(),
            _block(0, TEXT_BLOCK),
            _text(0, "Let me look."),
            _stop(0),
            _block(1, {"type": "tool_use", "id": "call_1", "name": "get", "input": {}}),
            _d(1, {"type": "input_json_delta", "partial_json": '{"ci'}),
            _d(1, {"type": "input_json_delta", "partial_json": 'ty": "Pa'}),
            _d(1, {"type": "input_json_delta", "partial_json": 'ris"}'}),
            _stop(1),
            *_end("tool_use", 5, 7),
        ],
    ),
    "two tool calls, each its own block": (
        [
            _delta(tool_calls=[{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{}"}}]),
            _delta(tool_calls=[{"index": 1, "id": "b", "function": {"name": "g", "arguments": '{"k"'}}]),
            _finish("tool_calls", tool_calls=[{"index": 1, "function": {"arguments": ": 1}"}}]),
        ],
        [
            _start(),
            _block(0, {"type": "tool_use", "id": "a", "name": "f", "input": {}}),
            _d(0, {"type": "input_json_delta", "partial_json": "{}"}),
            _stop(0),
            _block(1, {"type": "tool_use", "id": "b", "name": "g", "input": {}}),
            _d(1, {"type": "input_json_delta", "partial_json": '{"k"'}),
            _d(1, {"type": "input_json_delta", "partial_json": ": 1}"}),
            _stop(1),
            *_end("tool_use", 9, 0),
        ],
    ),
    "length is max_tokens": (
        [_finish("length", content="a")],
        [_start(), _block(0, TEXT_BLOCK), _text(0, "a"), _stop(0), *_end("max_tokens", 9, 0)],
    ),
    "continuous usage: message_start has the prompt, message_delta the last count": (
        [
            {**_delta(role="assistant", content=""), "usage": {"prompt_tokens": 4, "completion_tokens": 0}},
            {**_delta(content="x"), "usage": {"prompt_tokens": 4, "completion_tokens": 1}},
            _usage(4, 1),
        ],
        [_start(4), _block(0, TEXT_BLOCK), _text(0, "x"), _stop(0), *_end("end_turn", 4, 1)],
    ),
    # Still one (empty) text block: clients read content[0] (issue 20).
    "no output at all": ([], [_start(), _block(0, TEXT_BLOCK), _stop(0), *_end("end_turn", 9, 0)]),
}


@pytest.mark.parametrize("name", list(GOLDEN))
def test_golden_stream(name: str) -> None:
    chunks, expected = GOLDEN[name]
    assert _run(chunks) == expected


def test_a_matched_stop_sequence_is_stop_sequence() -> None:
    events = _run([_finish("stop", matched="END", content="a")], _stream(("END",)))
    assert events[-2] == _end("stop_sequence", 9, 0, "END")[0]


def _blocks_of(events: list[Event]) -> list[tuple[str, str]]:
    """(block type, its whole text) per block, from the events."""
    blocks: list[tuple[str, str]] = []
    for kind, payload in events:
        if kind == "content_block_start":
            blocks.append((payload["content_block"]["type"], ""))
        elif kind == "content_block_delta":
            delta = payload["delta"]
            text = delta.get("text") or delta.get("thinking") or delta.get("partial_json") or ""
            blocks[-1] = (blocks[-1][0], blocks[-1][1] + text)
    return blocks


CONTENT = "\n<think>\nlet me see: a<b</think>\n\nthe answer </think> <think>"


def test_think_tags_split_at_every_pair_of_boundaries() -> None:
    expected = [("thinking", "\nlet me see: a<b"), ("text", "the answer </think> <think>")]
    for i, j in itertools.combinations(range(1, len(CONTENT)), 2):
        pieces = [CONTENT[:i], CONTENT[i:j], CONTENT[j:]]
        events = _run([_delta(content=piece) for piece in pieces])
        assert _blocks_of(events) == expected, pieces


def test_tool_arguments_split_at_every_boundary_are_relayed_whole() -> None:
    arguments = '{"city": "Pa\\"ris", "n": [1, 2]}'
    for i in range(1, len(arguments)):
        calls = [
            _delta(
                tool_calls=[{"index": 0, "id": "c", "function": {"name": "f", "arguments": arguments[:i]}}]
            ),
            _delta(tool_calls=[{"index": 0, "function": {"arguments": arguments[i:]}}]),
        ]
        assert _blocks_of(_run(calls)) == [("tool_use", arguments)]


def test_a_failure_is_an_anthropic_error_event() -> None:
    stream = _stream()
    stream.event(_delta(content="a"), b"", b"")
    events = _events(stream.failure(GatewayError(ErrorCode.UPSTREAM_TIMEOUT, "The worker stopped sending.")))
    assert events == [
        ("error", {"type": "error", "error": {"type": "api_error", "message": "The worker stopped sending."}})
    ]


# --- whole answers --------------------------------------------------------------------------------


def _whole(message: dict[str, Any], finish: str = "stop", **fields: Any) -> dict[str, Any]:
    call = MESSAGES.parse(
        json.dumps(
            {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}], **fields}
        ).encode()
    )
    answer = {
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish, "stop_reason": fields.get("matched")}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
    }
    out: dict[str, Any] = json.loads(MESSAGES.whole(call, answer, b"", MODEL))
    assert out["id"].startswith("msg_")
    assert (out["type"], out["role"], out["model"]) == ("message", "assistant", MODEL)
    assert out["usage"] == {"input_tokens": 3, "output_tokens": 4}
    return out


WHOLE: dict[str, tuple[dict[str, Any], str, list[dict[str, Any]], str]] = {
    "text": ({"content": "hi"}, "stop", [{"type": "text", "text": "hi"}], "end_turn"),
    "reasoning_content": (
        {"reasoning_content": "hmm", "content": "42"},
        "stop",
        [{"type": "thinking", "thinking": "hmm", "signature": ""}, {"type": "text", "text": "42"}],
        "end_turn",
    ),
    "think tags": (
        {"content": "<think>hmm</think>\n\n42"},
        "length",
        [{"type": "thinking", "thinking": "hmm", "signature": ""}, {"type": "text", "text": "42"}],
        "max_tokens",
    ),
    "tool calls": (
        {
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
                {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "not json"}},
            ],
        },
        "tool_calls",
        [
            {"type": "tool_use", "id": "c1", "name": "f", "input": {"x": 1}},
            {"type": "tool_use", "id": "c2", "name": "g", "input": {}},
        ],
        "tool_use",
    ),
}


@pytest.mark.parametrize("name", list(WHOLE))
def test_golden_whole(name: str) -> None:
    message, finish, content, reason = WHOLE[name]
    out = _whole(message, finish)
    assert (out["content"], out["stop_reason"], out["stop_sequence"]) == (content, reason, None)


def test_a_whole_answer_names_the_stop_sequence_it_matched() -> None:
    out = _whole({"content": "a"}, "stop", stop_sequences=["END"], matched="END")
    assert (out["stop_reason"], out["stop_sequence"]) == ("stop_sequence", "END")


# --- requests -------------------------------------------------------------------------------------


def _chat(**fields: Any) -> dict[str, Any]:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], **fields}
    return translate(json.dumps(body).encode()).chat


def test_request_fields_translate_to_chat() -> None:
    chat = _chat(
        system="sys",
        stop_sequences=["a"],
        tools=[{"name": "t", "input_schema": {"type": "object"}}],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        metadata={"user_id": "u"},
        thinking={"type": "disabled"},
    )
    assert chat == {
        "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}],
        "max_tokens": 5,
        "stop": ["a"],
        "tools": [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "user": "u",
        "chat_template_kwargs": {"enable_thinking": False},
    }
    assert _chat(tool_choice={"type": "any"})["tool_choice"] == "required"
    assert _chat(tool_choice={"type": "none"})["tool_choice"] == "none"


def test_thinking_blocks_the_client_sends_back_are_dropped() -> None:
    assistant = {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "x", "signature": ""}, {"type": "text", "text": "y"}],
    }
    chat = _chat(messages=[{"role": "user", "content": "a"}, assistant])
    assert chat["messages"][1] == {"role": "assistant", "content": "y"}


REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"max_tokens": None}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"model": ""}, "model"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "critic", "content": "x"}]}, "messages[0].role"),
    # An unknown block is dropped (named in `ignored`); nothing left to answer is a 400.
    ({"messages": [{"role": "user", "content": [{"type": "video"}]}]}, "messages"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages"),
    (
        {"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}]},
        "messages[0].content[0].source.type",
    ),
    (
        {
            "messages": [
                {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": []}]}
            ]
        },
        "messages[0].content[0].input",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": 1}]}]},
        "messages[0].content[0].tool_use_id",
    ),
    ({"system": 5}, "system"),
    ({"stream": "yes"}, "stream"),
    ({"temperature": "hot"}, "temperature"),
    ({"top_k": 1.5}, "top_k"),
    ({"stop_sequences": "END"}, "stop_sequences"),
    ({"tools": [{"name": "t"}]}, "tools[0].input_schema"),
    ({"tool_choice": {"type": "tool"}}, "tool_choice.name"),
    ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
    ({"metadata": {"user_id": 7}}, "metadata.user_id"),
    ({"thinking": {"type": "maybe"}}, "thinking.type"),
]


@pytest.mark.parametrize(("fields", "param"), REFUSED, ids=[p for _, p in REFUSED])
def test_a_bad_body_is_a_400_naming_the_field(fields: dict[str, Any], param: str) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], **fields}
    with pytest.raises(GatewayError) as refused:
        translate(json.dumps(body).encode())
    assert type_and_status(refused.value) == ("invalid_request_error", 400)
    assert refused.value.param == param
    assert f"'{param}'" in refused.value.message


# --- errors ---------------------------------------------------------------------------------------


def test_every_error_code_has_an_anthropic_type_and_status() -> None:
    # 529 is where Anthropic's SDKs back off and retry: no worker free, or this gateway going away.
    overloaded = {
        ErrorCode.NO_HEALTHY_UPSTREAM,
        ErrorCode.POOL_SATURATED,
        ErrorCode.QUEUE_TIMEOUT,
        ErrorCode.DEADLINE_UNREACHABLE,
        ErrorCode.OVERFLOW_UNAVAILABLE,
        ErrorCode.OVERFLOW_NOT_ALLOWED,
        ErrorCode.SHUTTING_DOWN,
        ErrorCode.SERVER_BUSY,
    }
    for code in ErrorCode:
        kind, status = type_and_status(GatewayError(code, "x"))
        if code in overloaded:
            assert (kind, status) == ("overloaded_error", 529)
        elif code.status >= 500:
            assert (kind, status) == ("api_error", code.status), code
        else:
            assert status == code.status, code
    assert type_and_status(WorkerRejected(404, "x")) == ("not_found_error", 404)
    assert type_and_status(WorkerRejected(422, "x")) == ("invalid_request_error", 422)
