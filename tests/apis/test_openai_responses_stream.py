"""Golden tables: worker chat chunk sequences in, Responses events out (the translation alone, as
the relay drives it: one `event()` per worker chunk, then `done()` or `failure()`).

Ids are random, so each is replaced by its kind and the order it first appeared in (`msg#1`)."""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from gateway.apis.responses.dialect import RESPONSES
from gateway.apis.responses.stream import ResponsesStream
from gateway.errors import ErrorCode, GatewayError

_ID = re.compile(r"\b(resp|msg|rs|fc|call)_[0-9a-f]{32}\b")


def _stream(**fields: Any) -> ResponsesStream:
    body = {"model": "m", "input": "one two three four", "stream": True, **fields}
    stream = RESPONSES.stream(RESPONSES.parse(orjson.dumps(body)), "m")
    assert isinstance(stream, ResponsesStream)
    return stream


def _events(raw: bytes) -> list[dict[str, Any]]:
    """The client's bytes as events, checking the framing: `event: <type>` names its data's type."""
    out = []
    for block in raw.split(b"\n\n")[:-1]:
        head, data = block.split(b"\n")
        event = json.loads(data.removeprefix(b"data: "))
        assert head == b"event: " + event["type"].encode()
        out.append(event)
    return out


class _Ids:
    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        def name(match: re.Match[str]) -> str:
            if match.group(0) not in self.seen:
                kind = match.group(1)
                count = sum(1 for v in self.seen.values() if v.startswith(kind + "#"))
                self.seen[match.group(0)] = f"{kind}#{count + 1}"
            return self.seen[match.group(0)]

        return _ID.sub(name, text)


def _run(
    stream: ResponsesStream, chunks: list[dict[str, Any]], *, end: GatewayError | None = None
) -> list[bytes]:
    """The client's bytes for each worker chunk, then for the end: one entry per relay call."""
    out = [stream.event(chunk, orjson.dumps(chunk), b"") for chunk in chunks]
    out.append(stream.done() if end is None else stream.failure(end))
    return out


def _table(parts: list[bytes]) -> list[tuple[Any, ...]]:
    """Each event as (type, what it carries that matters), ids named by their order."""
    ids = _Ids()
    rows: list[tuple[Any, ...]] = []
    for event in _events(ids(b"".join(parts).decode()).encode()):
        kind = event["type"]
        if kind.startswith("response.") and "response" in event:
            response = event["response"]
            rows.append((kind, response["status"], len(response["output"])))
        elif kind.endswith("item.added") or kind.endswith("item.done"):
            item = event["item"]
            rows.append((kind, event["output_index"], item["id"], item["type"], item["status"]))
        elif kind.endswith(".delta"):
            rows.append((kind, event["output_index"], event["delta"]))
        elif kind in ("response.output_text.done", "response.reasoning_text.done"):
            rows.append((kind, event["output_index"], event["text"]))
        elif kind == "response.function_call_arguments.done":
            rows.append((kind, event["output_index"], event["name"], event["arguments"]))
        else:
            rows.append((kind, event["output_index"]))
    return rows


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "w", "choices": [choice], **extra}


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _final_usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "choices": [], "usage": _usage(prompt, completion)}


def _tool(
    index: int, *, call_id: str | None = None, name: str | None = None, args: str = ""
) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": args}
    if name is not None:
        function["name"] = name
    call: dict[str, Any] = {"index": index, "function": function}
    if call_id is not None:
        call.update(id=call_id, type="function")
    return _chunk({"tool_calls": [call]})


def test_text_golden_sequence_numbers_and_final_response() -> None:
    stream = _stream()
    parts = _run(
        stream,
        [
            _chunk({"role": "assistant", "content": ""}),
            _chunk({"content": "Hel"}),
            _chunk({"content": "lo"}, "stop"),
            _final_usage(4, 2),
        ],
    )
    events = _events(b"".join(parts))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert _table(parts) == [
        ("response.created", "in_progress", 0),
        ("response.in_progress", "in_progress", 0),
        ("response.output_item.added", 0, "msg#1", "message", "in_progress"),
        ("response.content_part.added", 0),
        ("response.output_text.delta", 0, "Hel"),
        ("response.output_text.delta", 0, "lo"),
        ("response.output_text.done", 0, "Hello"),
        ("response.content_part.done", 0),
        ("response.output_item.done", 0, "msg#1", "message", "completed"),
        ("response.completed", "completed", 1),
    ]
    final = events[-1]["response"]
    assert final["usage"] == {
        "input_tokens": 4,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 2,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 6,
    }
    assert final["output"][0]["content"] == [
        {"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []}
    ]
    assert final["model"] == "m"
    assert final["id"] == events[0]["response"]["id"]


def test_each_worker_chunk_is_relayed_at_once() -> None:
    """No delta waits for a later chunk: tool-argument fragments included."""
    stream = _stream()
    first = _events(stream.event(_chunk({"content": "a"}), b"", b""))
    assert [e["type"] for e in first][-1] == "response.output_text.delta"
    start = _events(stream.event(_tool(0, call_id="call_9", name="f"), b"", b""))
    assert [e["type"] for e in start] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
    ]
    fragment = _events(stream.event(_tool(0, args='{"ci'), b"", b""))
    assert [(e["type"], e["delta"]) for e in fragment] == [("response.function_call_arguments.delta", '{"ci')]


def test_tool_argument_fragments_split_anywhere_concatenate_to_the_arguments() -> None:
    parts = _run(
        _stream(tools=[{"type": "function", "name": "get_weather"}]),
        [
            _chunk({"role": "assistant", "content": ""}),
            _tool(0, call_id="call_a", name="get_weather"),
            _tool(0, args='{"ci'),
            _tool(0, args='ty": "Pa'),
            _tool(0, args='ris"}'),
            _chunk({}, "tool_calls"),
            _final_usage(4, 3),
        ],
    )
    assert _table(parts) == [
        ("response.created", "in_progress", 0),
        ("response.in_progress", "in_progress", 0),
        ("response.output_item.added", 0, "fc#1", "function_call", "in_progress"),
        ("response.function_call_arguments.delta", 0, '{"ci'),
        ("response.function_call_arguments.delta", 0, 'ty": "Pa'),
        ("response.function_call_arguments.delta", 0, 'ris"}'),
        ("response.function_call_arguments.done", 0, "get_weather", '{"city": "Paris"}'),
        ("response.output_item.done", 0, "fc#1", "function_call", "completed"),
        ("response.completed", "completed", 1),
    ]
    [call] = _events(parts[-1])[-1]["response"]["output"]
    assert (call["call_id"], call["name"], call["arguments"]) == (
        "call_a",
        "get_weather",
        '{"city": "Paris"}',
    )


def test_interleaved_parallel_calls_keep_their_own_arguments() -> None:
    parts = _run(
        _stream(),
        [
            _tool(0, call_id="call_a", name="f", args='{"a"'),
            _tool(1, call_id="call_b", name="g", args='{"b"'),
            _tool(0, args=": 1}"),
            _tool(1, args=": 2}"),
            _chunk({}, "tool_calls"),
        ],
    )
    output = _events(parts[-1])[-1]["response"]["output"]
    assert [(item["call_id"], item["name"], item["arguments"]) for item in output] == [
        ("call_a", "f", '{"a": 1}'),
        ("call_b", "g", '{"b": 2}'),
    ]


def test_reasoning_then_text_then_a_call_are_three_items_in_order() -> None:
    parts = _run(
        _stream(reasoning={"effort": "low"}),
        [
            _chunk({"reasoning_content": "thinking "}),
            _chunk({"reasoning_content": "hard"}),
            _chunk({"content": "Let me check."}),
            _tool(0, call_id="call_a", name="f", args="{}"),
            _chunk({}, "tool_calls"),
        ],
    )
    table = _table(parts)
    assert [row for row in table if row[0].endswith(("item.added", "item.done"))] == [
        ("response.output_item.added", 0, "rs#1", "reasoning", "in_progress"),
        ("response.output_item.done", 0, "rs#1", "reasoning", "completed"),
        ("response.output_item.added", 1, "msg#1", "message", "in_progress"),
        ("response.output_item.done", 1, "msg#1", "message", "completed"),
        ("response.output_item.added", 2, "fc#1", "function_call", "in_progress"),
        ("response.output_item.done", 2, "fc#1", "function_call", "completed"),
    ]
    assert ("response.reasoning_text.done", 0, "thinking hard") in table
    output = _events(parts[-1])[-1]["response"]["output"]
    assert output[0]["content"] == [{"type": "reasoning_text", "text": "thinking hard"}]


def test_a_length_finish_ends_incomplete() -> None:
    parts = _run(
        _stream(max_output_tokens=2), [_chunk({"content": "a "}), _chunk({"content": "b"}, "length")]
    )
    final = _events(parts[-1])[-1]
    assert final["type"] == "response.incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["response"]["output"][0]["status"] == "incomplete"


def test_usage_told_is_the_usage_metered() -> None:
    """The final report; without one the last cumulative one; without any the gateway's estimate
    (its prompt estimate and the chunks that carried output), as gateway.proxy.settlement meters."""
    cumulative = _run(
        _stream(), [_chunk({"content": "a"}, usage=_usage(4, 1)), _chunk({"content": "b"}, "stop")]
    )
    told = _events(cumulative[-1])[-1]["response"]["usage"]
    assert (told["input_tokens"], told["output_tokens"]) == (4, 1)
    stream = _stream()
    estimated = _run(stream, [_chunk({"content": "a"}), _chunk({"content": "b"}, "stop")])
    told = _events(estimated[-1])[-1]["response"]["usage"]
    assert (told["input_tokens"], told["output_tokens"]) == (stream._call.estimated_prompt_tokens(), 2)
    lying = _run(
        _stream(), [_chunk({"content": "a"}, "stop"), {"choices": [], "usage": {"prompt_tokens": -1}}]
    )
    assert _events(lying[-1])[-1]["response"]["usage"]["output_tokens"] == 1


def test_a_failure_mid_stream_is_response_failed_with_the_output_so_far() -> None:
    error = GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker's stream broke off.")
    parts = _run(_stream(), [_chunk({"content": "par"}, usage=_usage(4, 1))], end=error)
    final = _events(parts[-1])
    assert [e["type"] for e in final] == ["response.failed"]
    response = final[0]["response"]
    assert response["status"] == "failed"
    assert response["error"] == {"code": "server_error", "message": "The worker's stream broke off."}
    assert response["output"][0]["content"][0]["text"] == "par"
    assert response["usage"]["output_tokens"] == 1


def test_a_failure_before_any_chunk_still_opens_the_response() -> None:
    error = GatewayError(ErrorCode.UPSTREAM_TIMEOUT, "timed out waiting for the first token")
    assert [row[0] for row in _table(_run(_stream(), [], end=error))] == [
        "response.created",
        "response.in_progress",
        "response.failed",
    ]
