"""The Reframr worker's HTTP surface over a real loopback socket, with the deterministic engine."""

from __future__ import annotations

from typing import Any

import openai
import orjson
import pytest

from tests.servers import run_uvicorn
from tests.workers.reframr.support import MODEL, call, chat, metric, sse_chunks
from workers.common.framing import ChatFrames, CompletionFrames
from workers.reframr import create_app
from workers.reframr.deterministic import DeterministicEngine, TextOnly

pytestmark = pytest.mark.timeout(10)


# --- plain endpoints ----------------------------------------------------------------------------


def test_health_models_and_load_metrics(base_url: str) -> None:
    assert call(base_url, "GET", "/health")[:1] == (200,)
    status, _, raw = call(base_url, "GET", "/v1/models")
    assert status == 200
    assert [m["id"] for m in orjson.loads(raw)["data"]] == [MODEL]
    assert metric(base_url, "vllm:num_requests_running", model_name=MODEL) == 0
    assert metric(base_url, "vllm:num_requests_waiting", model_name=MODEL) == 0
    assert metric(base_url, "reframr_streaming_mode", model_name=MODEL, mode="token") == 1
    assert metric(base_url, "vllm:kv_cache_usage_perc") is None  # no KV cache: not exported


# --- stream framing -----------------------------------------------------------------------------


def test_chat_stream_events_in_vllm_order(base_url: str) -> None:
    body = chat("hello there", stream=True, stream_options={"include_usage": True})
    status, headers, raw = call(base_url, "POST", "/v1/chat/completions", body, {"x-request-id": "rid-1"})
    assert status == 200
    assert headers["content-type"] == "text/event-stream; charset=utf-8"
    assert headers["x-request-id"] == "rid-1"
    assert "x-usage-estimated" not in headers
    chunks = sse_chunks(raw)
    first, *content, last, usage = chunks
    assert {(c["id"], c["created"], c["model"], c["object"]) for c in chunks} == {
        (first["id"], first["created"], MODEL, "chat.completion.chunk")
    }
    frames = ChatFrames(first["id"], first["created"], MODEL)
    assert raw.startswith(frames.role())
    assert all(c["choices"][0]["finish_reason"] is None for c in content)
    text = "".join(c["choices"][0]["delta"]["content"] for c in [*content, last])
    assert text == "mode=default hello there w3 w4 w5 w6 w7 w8 w9 w10 w11"
    assert last["choices"][0]["finish_reason"] == "stop"
    assert usage == {
        **{k: first[k] for k in ("id", "object", "created", "model")},
        "choices": [],
        "usage": {"prompt_tokens": 4, "total_tokens": 16, "completion_tokens": 12},
    }


def test_usage_chunk_only_when_asked(base_url: str) -> None:
    for options in (None, {"include_usage": False}):
        body = chat("hi", stream=True, **({"stream_options": options} if options else {}))
        chunks = sse_chunks(call(base_url, "POST", "/v1/chat/completions", body)[2])
        assert all(c["choices"] for c in chunks)
        assert "usage" not in chunks[-1]


def test_completion_stream_framing(base_url: str) -> None:
    body = {"model": MODEL, "prompt": "one two", "stream": True, "stream_options": {"include_usage": True}}
    status, _, raw = call(base_url, "POST", "/v1/completions", body)
    assert status == 200
    *content, last, usage = sse_chunks(raw)
    frames = CompletionFrames(content[0]["id"], content[0]["created"], MODEL)
    assert raw.startswith(frames.token("mode=default", generated=1))
    assert {c["object"] for c in content} == {"text_completion"}
    assert "".join(c["choices"][0]["text"] for c in [*content, last]).startswith("mode=default one two w3")
    assert last["choices"][0]["finish_reason"] == "stop"
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] == 12


# --- non-stream answers, through the OpenAI SDK -------------------------------------------------


def test_non_stream_usage(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "a b c"}])
    assert answer.choices[0].message.content == "mode=default a b c w4 w5 w6 w7 w8 w9 w10 w11"
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens, answer.usage.total_tokens) == (
        5,
        12,
        17,
    )
    text = client.completions.create(model=MODEL, prompt="x y")
    assert text.usage is not None
    assert text.usage.prompt_tokens == 2
    assert text.usage.completion_tokens == 12


def test_sdk_stream_reassembles(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "q"}], stream=True, max_tokens=3
    )
    with stream:
        deltas = [c.choices[0].delta.content or "" for c in stream]
    assert "".join(deltas) == "mode=default q w2"


def test_max_tokens(client: openai.OpenAI, engine: DeterministicEngine) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "a b c"}], max_tokens=2
    )
    assert answer.choices[0].message.content == "mode=default a"
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 2
    assert engine.calls[-1].max_tokens == 2
    newer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "a"}], max_completion_tokens=1, max_tokens=5
    )
    assert newer.choices[0].message.content == "mode=default"


def test_stop_sequences(base_url: str, client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "alpha beta gamma"}], stop=["gamma", "beta"]
    )
    assert answer.choices[0].message.content == "mode=default alpha "
    assert answer.choices[0].finish_reason == "stop"
    one = client.completions.create(model=MODEL, prompt="alpha beta", stop="ta w")
    assert one.choices[0].text == "mode=default alpha be"
    # Streamed, a stop that spans pieces is never partly sent.
    body = chat("alpha beta gamma", stream=True, stop="a gam")
    chunks = sse_chunks(call(base_url, "POST", "/v1/chat/completions", body)[2])
    texts = [c["choices"][0]["delta"].get("content", "") for c in chunks]
    assert "".join(texts) == "mode=default alpha bet"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_reasoning_mode_and_sampling_pass_through(client: openai.OpenAI, engine: DeterministicEngine) -> None:
    for mode in ("none", "deep", "memory", "tool"):
        answer = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], extra_body={"reasoning_mode": mode}
        )
        assert (answer.choices[0].message.content or "").startswith(f"mode={mode} x")
        assert engine.calls[-1].reasoning_mode == mode
    client.completions.create(model=MODEL, prompt="x")
    assert engine.calls[-1].reasoning_mode is None
    assert engine.calls[-1].sampling == (0.58, 64, 0.92, 1.25)  # Reframr's defaults
    client.completions.create(
        model=MODEL,
        prompt="x",
        temperature=0.1,
        top_p=0.5,
        extra_body={"top_k": 7, "repetition_penalty": 1.1},
    )
    assert engine.calls[-1].sampling == (0.1, 7, 0.5, 1.1)


# --- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, None),
        (b"[1, 2]", 400, None),
        (chat("x", reasoning_mode="sideways"), 400, "reasoning_mode"),
        (chat("x", max_tokens=0), 400, "max_tokens"),
        (chat("x", temperature="hot"), 400, "temperature"),
        (chat("x", stop=[1]), 400, "stop"),
        (chat("x", n=2), 400, "n"),
        ({"model": MODEL, "messages": []}, 400, "messages"),
        (chat("x", model="other"), 404, "model"),
    ],
)
def test_error_envelopes(base_url: str, body: Any, status: int, param: str | None) -> None:
    got, headers, raw = call(base_url, "POST", "/v1/chat/completions", body, {"x-request-id": "err-1"})
    assert got == status
    assert headers["x-request-id"] == "err-1"
    error = orjson.loads(raw)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["param"], error["code"]) == (param, status)
    assert error["type"] == ("NotFoundError" if status == 404 else "BadRequestError")


def test_sdk_raises_on_unknown_reasoning_mode(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=MODEL, prompt="x", extra_body={"reasoning_mode": "psychic"})
    assert "reasoning_mode" in str(err.value)


def test_estimated_usage_is_labelled() -> None:
    engine = TextOnly(DeterministicEngine(answer_tokens=4))
    with run_uvicorn(create_app(engine, MODEL)) as url:
        for stream in (False, True):
            status, headers, _raw = call(url, "POST", "/v1/completions", {"prompt": "p q", "stream": stream})
            assert status == 200
            assert headers["x-usage-estimated"] == "true"
            assert headers["x-usage-estimated"] == "true"
        usage = orjson.loads(call(url, "POST", "/v1/completions", {"prompt": "p q"})[2])["usage"]
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == (2, 4)
        usage = orjson.loads(call(url, "POST", "/v1/completions", {"prompt": ""})[2])["usage"]
        assert usage["prompt_tokens"] == 1  # never 0 (USE-1)


def test_an_estimate_never_exceeds_the_cap() -> None:
    class Wordy(TextOnly):
        def generate_text(self, *args: Any, **kwargs: Any) -> str:
            return "one two three four five"  # more words than its tokens, as estimates can be

    with run_uvicorn(create_app(Wordy(DeterministicEngine()), MODEL)) as url:
        answer = orjson.loads(call(url, "POST", "/v1/completions", {"prompt": "p", "max_tokens": 2})[2])
        assert answer["usage"]["completion_tokens"] == 2
        assert answer["choices"][0]["finish_reason"] == "length"


def test_a_configured_max_model_len_is_listed_and_enforced() -> None:
    engine = DeterministicEngine()
    with run_uvicorn(create_app(engine, MODEL, max_model_len=10)) as url:
        assert orjson.loads(call(url, "GET", "/v1/models")[2])["data"][0]["max_model_len"] == 10
        # "User: a b c\n\nAssistant:" is 5 prompt tokens, leaving room for 5.
        status, _, raw = call(url, "POST", "/v1/chat/completions", chat("a b c", max_tokens=6))
        assert status == 400
        assert orjson.loads(raw)["error"]["param"] == "max_tokens"
        status, _, raw = call(url, "POST", "/v1/chat/completions", chat("a b c"))
        assert status == 200
        assert orjson.loads(raw)["choices"][0]["finish_reason"] == "length"
        assert engine.calls[-1].max_tokens == 5
        status, _, raw = call(url, "POST", "/v1/chat/completions", chat("1 2 3 4 5 6 7 8"))
        assert status == 400
        assert orjson.loads(raw)["error"]["param"] == "messages"
