"""The fake worker's running usage (workers/CONTRACT.md SSE-10), framed as vLLM 0.32 frames it.

With `stream_options: {"include_usage": true, "continuous_usage_stats": true}` every chunk with a
choice carries `usage` after `choices`; chat chunks also name `"completion_tokens_details": null`,
completion chunks do not (both seen on a real vLLM 0.32.0). Token i's chunk counts i + 1 generated
tokens, the chat role chunk 0, and the final usage chunk still follows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tests.servers import run_uvicorn
from tests.workers.test_fake_worker import call, chat_chunk, head_of, sse_payloads, text_chunk, usage_chunk
from workers.common.framing import ChatFrames, CompletionFrames
from workers.fake import create_app

MODEL = "fake-model"
PROMPT = "one two three four"  # 4 prompt tokens
CONTINUOUS = {"include_usage": True, "continuous_usage_stats": True}

pytestmark = pytest.mark.timeout(10)


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with run_uvicorn(create_app([MODEL])) as url:
        yield url


def running(prompt: int, generated: int, *, chat: bool) -> dict[str, Any]:
    """vLLM's per-chunk usage object, its fields in vLLM's order."""
    body: dict[str, Any] = {
        "prompt_tokens": prompt,
        "total_tokens": prompt + generated,
        "completion_tokens": generated,
    }
    return {**body, "completion_tokens_details": None} if chat else body


def with_usage(chunk: bytes, usage: dict[str, Any]) -> bytes:
    return orjson.dumps({**orjson.loads(chunk), "usage": usage})


def stream(base_url: str, path: str, body: dict[str, Any], tokens: int, **headers: str) -> list[bytes]:
    status, _, raw = call(base_url, "POST", path, body, {"x-fake-tokens": str(tokens), **headers})
    assert status == 200
    return sse_payloads(raw)


def chat_body(**options: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": PROMPT}]
    return {"model": MODEL, "messages": messages, "stream": True, "stream_options": options}


def test_every_chat_chunk_carries_the_usage_so_far(base_url: str) -> None:
    payloads = stream(base_url, "/v1/chat/completions", chat_body(**CONTINUOUS), 3)
    head = head_of(orjson.loads(payloads[0]))
    assert payloads == [
        with_usage(chat_chunk(head, {"role": "assistant", "content": ""}), running(4, 0, chat=True)),
        with_usage(chat_chunk(head, {"content": "tok0 "}), running(4, 1, chat=True)),
        with_usage(chat_chunk(head, {"content": "tok1 "}), running(4, 2, chat=True)),
        with_usage(chat_chunk(head, {"content": "tok2 "}, finish="stop"), running(4, 3, chat=True)),
        usage_chunk(head, prompt=4, completion=3),
        b"[DONE]",
    ]


def test_every_completion_chunk_carries_the_usage_so_far(base_url: str) -> None:
    body = {"model": MODEL, "prompt": PROMPT, "stream": True, "stream_options": CONTINUOUS}
    payloads = stream(base_url, "/v1/completions", body, 2)
    head = head_of(orjson.loads(payloads[0]))
    assert payloads == [
        with_usage(text_chunk(head, "tok0 "), running(4, 1, chat=False)),
        with_usage(text_chunk(head, "tok1 ", finish="stop"), running(4, 2, chat=False)),
        usage_chunk(head, prompt=4, completion=2),
        b"[DONE]",
    ]


def test_max_tokens_and_an_empty_answer_count_alike(base_url: str) -> None:
    capped = {**chat_body(**CONTINUOUS), "max_tokens": 2}
    chunks = [orjson.loads(p) for p in stream(base_url, "/v1/chat/completions", capped, 10)[:-1]]
    assert [c["usage"]["completion_tokens"] for c in chunks] == [0, 1, 2, 2]
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    empty = [
        orjson.loads(p) for p in stream(base_url, "/v1/chat/completions", chat_body(**CONTINUOUS), 0)[:-1]
    ]
    assert [(c["choices"] != [], c["usage"]["completion_tokens"]) for c in empty] == [
        (True, 0),
        (True, 0),
        (False, 0),
    ]


def test_a_streamed_tool_call_counts_its_argument_fragments(base_url: str) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    body = {**chat_body(**CONTINUOUS), "tools": tools}
    payloads = stream(base_url, "/v1/chat/completions", body, 8, **{"x-fake-tool-call": "f"})
    role, start, first, last, final = (orjson.loads(p) for p in payloads[:-1])
    assert start["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "f"
    assert [c["usage"]["completion_tokens"] for c in (role, start, first, last)] == [0, 0, 1, 2]
    assert last["choices"][0]["finish_reason"] == "tool_calls"
    assert (final["choices"], final["usage"]["completion_tokens"]) == ([], 2)


def test_a_stream_that_fails_midway_has_counted_what_it_sent(base_url: str) -> None:
    # No final usage chunk comes after an error event: the running usage is all there is to meter.
    payloads = stream(
        base_url, "/v1/chat/completions", chat_body(**CONTINUOUS), 5, **{"x-fake-error-event-after": "2"}
    )
    chunks = [orjson.loads(p) for p in payloads[:-2]]
    assert [c["usage"]["completion_tokens"] for c in chunks] == [0, 1, 2]
    assert orjson.loads(payloads[-2])["error"]["code"] == 500
    assert payloads[-1] == b"[DONE]"


@pytest.mark.parametrize(
    "options",
    [
        {"include_usage": False, "continuous_usage_stats": True},  # vLLM: ignored without include_usage
        {"continuous_usage_stats": True},
        {"include_usage": True, "continuous_usage_stats": False},
        {"include_usage": True},
    ],
)
def test_no_running_usage_unless_asked_with_include_usage(base_url: str, options: dict[str, Any]) -> None:
    chunks = [orjson.loads(p) for p in stream(base_url, "/v1/chat/completions", chat_body(**options), 3)[:-1]]
    carrying = [c for c in chunks if "usage" in c]
    assert carrying == ([chunks[-1]] if options.get("include_usage") else [])
    assert all(c["choices"] == [] for c in carrying)


@pytest.mark.parametrize("text", ["tok0 ", "", '"quoted" \\ back\nslash é 日本 🚀 \u2028'])
def test_token_chunks_with_usage_are_byte_identical_to_orjson(text: str) -> None:
    head = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 7, "model": 'm"é'}
    frames = ChatFrames("chatcmpl-x", 7, 'm"é', continuous_usage=5)
    expected = with_usage(chat_chunk(head, {"content": text}), running(5, 3, chat=True))
    assert frames.token(text, generated=3) == b"data: " + expected + b"\n\n"
    head = {**head, "id": "cmpl-x", "object": "text_completion"}
    completion = CompletionFrames("cmpl-x", 7, 'm"é', continuous_usage=5)
    expected = with_usage(text_chunk(head, text), running(5, 3, chat=False))
    assert completion.token(text, generated=3) == b"data: " + expected + b"\n\n"
