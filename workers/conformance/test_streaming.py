"""SSE and USE rules: a stream framed the way vLLM frames it, and the usage it reports."""

from __future__ import annotations

import pytest

from workers.conformance.checks import FINISH_REASONS, usage_object
from workers.conformance.client import Stream, Worker
from workers.conformance.conftest import SHORT_TOKENS, Exchanges, stream_context
from workers.conformance.rules import rule

KINDS = ["chat", "completions"]
# A stream with usage on every chunk (SSE-10) must be framed like any other, so it is among them.
USAGE = ["asked", "absent", "declined", "continuous"]
OBJECTS = {"chat": "chat.completion.chunk", "completions": "text_completion"}


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture(params=USAGE)
def usage(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture
def stream(exchanges: Exchanges, kind: str, usage: str) -> Stream:
    return exchanges.stream(kind, usage)


@pytest.mark.rules("SSE-1")
def test_stream_headers(stream: Stream, kind: str, usage: str) -> None:
    reply, where = stream.reply, stream_context(kind, usage)
    rule("SSE-1", reply.status == 200, f"{where}: expected 200, saw {reply.brief()}")
    content_type = reply.headers.get("content-type", "")
    rule(
        "SSE-1",
        content_type.split(";")[0].strip() == "text/event-stream",
        f"{where}: expected content-type text/event-stream, saw {content_type!r}",
    )
    rule(
        "SSE-1",
        "content-length" not in reply.headers,
        f"{where}: expected no content-length on a stream, saw {reply.headers.get('content-length')!r}",
    )


@pytest.mark.rules("SSE-2")
def test_stream_is_data_events_only(stream: Stream, kind: str, usage: str) -> None:
    where = stream_context(kind, usage)
    rule(
        "SSE-2",
        not stream.framing_problems,
        f"{where}: expected only 'data: <json>\\n\\n' events, saw: {'; '.join(stream.framing_problems)}",
    )
    rule(
        "SSE-2",
        not stream.trailing,
        f"{where}: expected the body to end with a blank line, saw trailing {stream.trailing[:120]!r}",
    )


@pytest.mark.rules("SSE-3")
def test_stream_ends_with_done(stream: Stream, kind: str, usage: str) -> None:
    where = stream_context(kind, usage)
    rule(
        "SSE-3",
        stream.reply.complete,
        f"{where}: expected the body to end after [DONE], saw: {stream.reply.problem}",
    )
    rule(
        "SSE-3",
        stream.done_count == 1,
        f"{where}: expected exactly one `data: [DONE]`, saw {stream.done_count}",
    )
    rule(
        "SSE-3",
        stream.last_event == b"[DONE]",
        f"{where}: expected the last event to be [DONE], saw {stream.last_event!r}",
    )


@pytest.mark.rules("SSE-4", "REQ-1")
def test_chunks_share_one_identity(worker: Worker, stream: Stream, kind: str, usage: str) -> None:
    where = stream_context(kind, usage)
    rule("SSE-4", stream.chunks, f"{where}: expected JSON chunks, saw none ({stream.reply.brief()})")
    first = stream.chunks[0]
    rule("SSE-4", isinstance(first.get("id"), str) and first["id"], f"{where}: expected a string id: {first}")
    for number, chunk in enumerate(stream.chunks, 1):
        for name in ("id", "created"):
            rule(
                "SSE-4",
                chunk.get(name) == first.get(name),
                f"{where}: chunk {number}: expected {name} {first.get(name)!r} as on chunk 1, "
                f"saw {chunk.get(name)!r}",
            )
        rule(
            "SSE-4",
            chunk.get("object") == OBJECTS[kind],
            f"{where}: chunk {number}: expected object {OBJECTS[kind]!r}, saw {chunk.get('object')!r}",
        )
        rule(
            "REQ-1",
            chunk.get("model") == worker.model,
            f"{where}: chunk {number}: expected model {worker.model!r}, saw {chunk.get('model')!r}",
        )


@pytest.mark.rules("SSE-5")
def test_first_chat_chunk_carries_the_role(exchanges: Exchanges, usage: str) -> None:
    stream, where = exchanges.stream("chat", usage), stream_context("chat", usage)
    rule("SSE-5", stream.with_choices, f"{where}: expected chunks with choices, saw {stream.reply.brief()}")
    first = stream.chunks[0]
    choices = first.get("choices") or [{}]
    delta = choices[0].get("delta")
    rule(
        "SSE-5",
        isinstance(delta, dict) and delta.get("role") == "assistant",
        f'{where}: expected the first chunk\'s delta to have "role": "assistant", saw {first}',
    )
    later = [c for c in stream.with_choices[1:] if (c["choices"][0].get("delta") or {}).get("role")]
    rule("SSE-5", not later, f"{where}: expected no role after the first chunk, saw {later[:2]}")


@pytest.mark.rules("SSE-6")
def test_one_chunk_finishes_the_choice(stream: Stream, kind: str, usage: str) -> None:
    where = stream_context(kind, usage)
    with_choices = stream.with_choices
    rule("SSE-6", with_choices, f"{where}: expected chunks with choices, saw {stream.reply.brief()}")
    for number, chunk in enumerate(with_choices, 1):
        choice = chunk["choices"][0]
        rule("SSE-6", choice.get("index") == 0, f"{where}: chunk {number}: expected index 0: {chunk}")
        if kind == "chat":
            delta = choice.get("delta")
            ok = isinstance(delta, dict) and (
                delta.get("content") is None or isinstance(delta["content"], str)
            )
            rule("SSE-6", ok, f"{where}: chunk {number}: expected a delta with string content: {chunk}")
        else:
            ok = isinstance(choice.get("text"), str)
            rule("SSE-6", ok, f"{where}: chunk {number}: expected a string `text`: {chunk}")
    finishing = [c for c in with_choices if c["choices"][0].get("finish_reason") is not None]
    rule(
        "SSE-6",
        len(finishing) == 1,
        f"{where}: expected exactly one chunk with a finish_reason, saw {len(finishing)}: {finishing[:3]}",
    )
    reason = finishing[0]["choices"][0]["finish_reason"]
    rule(
        "SSE-6",
        reason in FINISH_REASONS,
        f"{where}: expected finish_reason in {FINISH_REASONS}, saw {reason!r}",
    )
    rule(
        "SSE-6",
        finishing[0] is with_choices[-1],
        f"{where}: expected the finish_reason on the last chunk with choices, saw chunks after it: "
        f"{with_choices[with_choices.index(finishing[0]) + 1 :][:3]}",
    )


@pytest.mark.rules("SSE-7", "REQ-2")
def test_usage_chunk_when_asked(exchanges: Exchanges, kind: str) -> None:
    stream, where = exchanges.stream(kind, "asked"), stream_context(kind, "asked")
    carrying = [c for c in stream.chunks if c.get("usage") is not None]
    rule("SSE-7", len(carrying) == 1, f"{where}: expected exactly one chunk with usage, saw {len(carrying)}")
    chunk = carrying[0]
    rule(
        "SSE-7",
        chunk.get("choices") == [],
        f'{where}: expected the usage chunk to have "choices": [], saw {chunk}',
    )
    rule(
        "SSE-7",
        chunk is stream.chunks[-1],
        f"{where}: expected the usage chunk right before [DONE], saw after it: "
        f"{stream.chunks[stream.chunks.index(chunk) + 1 :][:2]}",
    )
    empty = [c for c in stream.chunks if c.get("choices") == [] and c is not chunk]
    rule("SSE-7", not empty, f'{where}: expected no other chunk with "choices": [], saw {empty[:2]}')
    counts = usage_object("SSE-7", chunk["usage"], f"{where}: usage chunk")
    rule(
        "REQ-2",
        counts["completion_tokens"] <= SHORT_TOKENS,
        f"{where}: expected completion_tokens <= max_tokens {SHORT_TOKENS}, saw {counts}",
    )


@pytest.mark.rules("SSE-8")
@pytest.mark.parametrize("unasked", ["absent", "declined"])
def test_no_usage_unless_asked(exchanges: Exchanges, kind: str, unasked: str) -> None:
    stream, where = exchanges.stream(kind, unasked), stream_context(kind, unasked)
    carrying = [c for c in stream.chunks if c.get("usage") is not None]
    rule("SSE-8", not carrying, f"{where}: expected no chunk with usage, saw {carrying[:2]}")
    empty = [c for c in stream.chunks if c.get("choices") == []]
    rule("SSE-8", not empty, f'{where}: expected no chunk with "choices": [], saw {empty[:2]}')


@pytest.mark.rules("USE-3")
def test_stream_and_whole_answer_count_the_prompt_alike(exchanges: Exchanges, kind: str) -> None:
    whole = exchanges.whole(kind)
    rule("USE-3", whole.status == 200, f"expected 200 to the {kind} request, saw {whole.brief()}")
    whole_usage = usage_object("USE-1", whole.json().get("usage"), f"non-stream {kind} answer")
    carrying = [c for c in exchanges.stream(kind, "asked").chunks if c.get("usage") is not None]
    rule("SSE-7", carrying, f"{stream_context(kind, 'asked')}: expected a usage chunk, saw none")
    streamed = usage_object("SSE-7", carrying[-1]["usage"], f"{kind} stream usage chunk")
    rule(
        "USE-3",
        streamed["prompt_tokens"] == whole_usage["prompt_tokens"],
        f"{kind}: expected the same prompt_tokens for the same request, saw {whole_usage['prompt_tokens']} "
        f"(non-stream) and {streamed['prompt_tokens']} (stream)",
    )
