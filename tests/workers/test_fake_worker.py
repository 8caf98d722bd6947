"""The fake worker, seen from a real client over a real loopback socket."""

from __future__ import annotations

import http.client
import json
import logging
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from tests.servers import free_port, run_uvicorn
from workers.common.framing import ChatFrames, CompletionFrames
from workers.fake import create_app
from workers.fake.aborts import HideInjectedAborts
from workers.fake.records import RequestRecord, RequestRecords

MODEL = "fake-model"
OTHER = "other-model"
PROMPT = "hello there fake worker"  # 4 prompt tokens
REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(10)


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with run_uvicorn(create_app((MODEL, OTHER))) as url:
        # Keep the intended aborts of x-fake-fail-after from printing tracebacks.
        log_filter = HideInjectedAborts()
        logging.getLogger("uvicorn.error").addFilter(log_filter)
        try:
            yield url
        finally:
            logging.getLogger("uvicorn.error").removeFilter(log_filter)


# --- a small HTTP client ------------------------------------------------------------------------


def _connect(base_url: str, timeout: float = 5.0) -> http.client.HTTPConnection:
    parts = urlsplit(base_url)
    assert parts.hostname is not None
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)


def _send(
    conn: http.client.HTTPConnection,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> None:
    data = body if isinstance(body, bytes) or body is None else orjson.dumps(body)
    all_headers = {"content-type": "application/json", **(headers or {})}
    conn.request(method, path, body=data, headers=all_headers)


def call(
    base_url: str,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn = _connect(base_url)
    try:
        _send(conn, method, path, body, headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def get_json(base_url: str, path: str) -> Any:
    status, _, raw = call(base_url, "GET", path)
    assert status == 200, raw
    return orjson.loads(raw)


def record_of(base_url: str, request_id: str) -> dict[str, Any]:
    record: dict[str, Any] = get_json(base_url, f"/fake/requests/{request_id}")
    return record


def wait_for(predicate: Callable[[], bool], timeout_s: float) -> float:
    """Seconds until `predicate` held; fails the test if it does not within `timeout_s`."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            pytest.fail(f"condition not met within {timeout_s}s")
        time.sleep(0.01)
    return time.monotonic() - start


def sse_payloads(raw: bytes) -> list[bytes]:
    """The `data:` payloads of a complete SSE body, checking the event framing on the way."""
    events = raw.split(b"\n\n")
    assert events[-1] == b"", f"body does not end with a blank line: {raw[-40:]!r}"
    payloads = []
    for event in events[:-1]:
        assert event.startswith(b"data: "), event
        payloads.append(event[len(b"data: ") :])
    return payloads


def chat_body(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], **extra}


def head_of(chunk: dict[str, Any]) -> dict[str, Any]:
    return {k: chunk[k] for k in ("id", "object", "created", "model")}


def chat_chunk(head: dict[str, Any], delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    if finish is not None:
        choice["stop_reason"] = None
    return orjson.dumps({**head, "choices": [choice]})


def text_chunk(head: dict[str, Any], text: str, finish: str | None = None) -> bytes:
    choice = {
        "index": 0,
        "text": text,
        "logprobs": None,
        "finish_reason": finish,
        "stop_reason": None,
    }
    return orjson.dumps({**head, "choices": [choice]})


def usage_chunk(head: dict[str, Any], prompt: int, completion: int) -> bytes:
    usage = {"prompt_tokens": prompt, "total_tokens": prompt + completion}
    return orjson.dumps({**head, "choices": [], "usage": {**usage, "completion_tokens": completion}})


class OpenStream:
    """A streaming response read event by event, with the arrival time of each."""

    def __init__(self, base_url: str, path: str, body: Any, headers: dict[str, str]) -> None:
        self.conn = _connect(base_url)
        self.started = time.monotonic()
        _send(self.conn, "POST", path, body, headers)
        self.resp = self.conn.getresponse()

    def next_event(self) -> tuple[float, bytes]:
        lines: list[bytes] = []
        while True:
            line = self.resp.readline()
            assert line, "stream ended"
            if line == b"\n":
                return time.monotonic() - self.started, b"".join(lines)
            lines.append(line.rstrip(b"\n"))

    def close(self) -> None:
        self.resp.close()
        self.conn.close()

    def __enter__(self) -> OpenStream:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def assert_held_then_left(base_url: str, request_id: str, sent: int, stream: OpenStream) -> None:
    """`x-fake-hold-after`: the worker holds with `sent` token chunks out while the client reads
    on, and sends nothing more once the client (closing `stream`) has left."""
    record = record_of(base_url, request_id)
    assert (record["state"], record["tokens_sent"]) == ("running", sent)
    stream.close()
    wait_for(lambda: record_of(base_url, request_id)["state"] == "disconnected", 8.0)
    assert record_of(base_url, request_id)["tokens_sent"] == sent


# --- plain endpoints ----------------------------------------------------------------------------


def test_health_and_models(base_url: str) -> None:
    assert get_json(base_url, "/health") == {"status": "ok"}
    models = get_json(base_url, "/v1/models")
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == [MODEL, OTHER]
    for model in models["data"]:
        assert model["object"] == "model"
        assert model["owned_by"] == "sluicegate-fake"
        assert isinstance(model["created"], int)


# --- stream framing -----------------------------------------------------------------------------


def test_chat_stream_is_framed_like_vllm(base_url: str) -> None:
    status, headers, raw = call(
        base_url,
        "POST",
        "/v1/chat/completions",
        chat_body(stream=True),
        {"x-fake-tokens": "3", "x-request-id": "framing-chat"},
    )
    assert status == 200
    assert headers["content-type"] == "text/event-stream; charset=utf-8"
    assert headers["x-request-id"] == "framing-chat"
    payloads = sse_payloads(raw)
    assert payloads[-1] == b"[DONE]"
    head = head_of(orjson.loads(payloads[0]))
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{32}", head["id"])
    assert head["object"] == "chat.completion.chunk"
    assert head["model"] == MODEL
    assert payloads[:-1] == [
        chat_chunk(head, {"role": "assistant", "content": ""}),
        chat_chunk(head, {"content": "tok0 "}),
        chat_chunk(head, {"content": "tok1 "}),
        chat_chunk(head, {"content": "tok2 "}, finish="stop"),
    ]
    record = record_of(base_url, "framing-chat")
    assert (record["state"], record["tokens_sent"], record["status"]) == ("completed", 3, 200)


def test_chat_stream_usage_chunk_only_when_asked(base_url: str) -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "one two three"}]},
    ]
    body = {"model": OTHER, "messages": messages, "stream": True}
    asked = {**body, "stream_options": {"include_usage": True}}
    _, _, raw = call(base_url, "POST", "/v1/chat/completions", asked, {"x-fake-tokens": "2"})
    payloads = sse_payloads(raw)
    head = head_of(orjson.loads(payloads[0]))
    assert head["model"] == OTHER
    assert payloads[-3:] == [
        chat_chunk(head, {"content": "tok1 "}, finish="stop"),
        usage_chunk(head, prompt=5, completion=2),
        b"[DONE]",
    ]

    not_asked = {**body, "stream_options": {"include_usage": False}}
    _, _, raw = call(base_url, "POST", "/v1/chat/completions", not_asked, {"x-fake-tokens": "2"})
    assert b'"usage"' not in raw
    assert len(sse_payloads(raw)) == 1 + 2 + 1


def test_completions_stream_is_framed_like_vllm(base_url: str) -> None:
    body = {
        "model": MODEL,
        "prompt": ["one two", "three"],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    _, _, raw = call(base_url, "POST", "/v1/completions", body, {"x-fake-tokens": "2"})
    payloads = sse_payloads(raw)
    head = head_of(orjson.loads(payloads[0]))
    assert re.fullmatch(r"cmpl-[0-9a-f]{32}", head["id"])
    assert head["object"] == "text_completion"
    assert payloads == [
        text_chunk(head, "tok0 "),
        text_chunk(head, "tok1 ", finish="stop"),
        usage_chunk(head, prompt=3, completion=2),
        b"[DONE]",
    ]


def test_stream_max_tokens_caps_and_finishes_with_length(base_url: str) -> None:
    body = chat_body(stream=True, max_tokens=2, stream_options={"include_usage": True})
    _, _, raw = call(base_url, "POST", "/v1/chat/completions", body, {"x-fake-tokens": "10"})
    chunks = [orjson.loads(p) for p in sse_payloads(raw)[:-1]]
    assert [c["choices"][0]["delta"].get("content") for c in chunks[:-1]] == ["", "tok0 ", "tok1 "]
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 2


def test_zero_tokens_still_finish_the_stream(base_url: str) -> None:
    _, _, raw = call(base_url, "POST", "/v1/chat/completions", chat_body(stream=True), {"x-fake-tokens": "0"})
    payloads = sse_payloads(raw)
    head = head_of(orjson.loads(payloads[0]))
    assert payloads[1:] == [chat_chunk(head, {"content": ""}, finish="stop"), b"[DONE]"]


@pytest.mark.parametrize("text", ["tok0 ", "", '"quoted" \\ back\nslash é 日本 🚀 \u2028'])
def test_token_chunks_are_byte_identical_to_orjson(text: str) -> None:
    head = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 7, "model": 'm"é'}
    assert ChatFrames("chatcmpl-x", 7, 'm"é').token(text, generated=1) == (
        b"data: " + chat_chunk(head, {"content": text}) + b"\n\n"
    )
    head = {**head, "id": "cmpl-x", "object": "text_completion"}
    assert CompletionFrames("cmpl-x", 7, 'm"é').token(text, generated=1) == (
        b"data: " + text_chunk(head, text) + b"\n\n"
    )


# --- non-stream answers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header_tokens", "limits", "expected_tokens", "finish"),
    [
        ("3", {}, 3, "stop"),
        ("8", {"max_tokens": 3}, 3, "length"),
        ("2", {"max_tokens": 5}, 2, "stop"),
        ("8", {"max_tokens": 6, "max_completion_tokens": 1}, 1, "length"),
    ],
)
def test_non_stream_chat(
    base_url: str, header_tokens: str, limits: dict[str, int], expected_tokens: int, finish: str
) -> None:
    status, headers, raw = call(
        base_url,
        "POST",
        "/v1/chat/completions",
        chat_body(**limits),
        {"x-fake-tokens": header_tokens},
    )
    assert status == 200
    assert headers["content-type"] == "application/json"
    answer = orjson.loads(raw)
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{32}", answer["id"])
    text = "".join(f"tok{i} " for i in range(expected_tokens))
    message = {"role": "assistant", "content": text, "tool_calls": []}
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": finish,
        "stop_reason": None,
    }
    usage = {
        "prompt_tokens": 4,
        "total_tokens": 4 + expected_tokens,
        "completion_tokens": expected_tokens,
        "prompt_tokens_details": None,
    }
    expected = {**head_of(answer), "choices": [choice], "usage": usage}
    assert (answer["object"], answer["model"]) == ("chat.completion", MODEL)
    assert raw == orjson.dumps(expected)


def test_non_stream_completions(base_url: str) -> None:
    body = {"model": MODEL, "prompt": "a b c d e f", "max_tokens": 16}
    status, _, raw = call(base_url, "POST", "/v1/completions", body)
    assert status == 200
    answer = orjson.loads(raw)
    choice = {
        "index": 0,
        "text": "".join(f"tok{i} " for i in range(8)),
        "logprobs": None,
        "finish_reason": "stop",
        "stop_reason": None,
    }
    usage = {
        "prompt_tokens": 6,
        "total_tokens": 14,
        "completion_tokens": 8,
        "prompt_tokens_details": None,
    }
    assert answer["object"] == "text_completion"
    assert raw == orjson.dumps({**head_of(answer), "choices": [choice], "usage": usage})


# --- timing -------------------------------------------------------------------------------------


def test_delays_space_the_stream(base_url: str) -> None:
    headers = {
        "x-fake-tokens": "3",
        "x-fake-first-token-delay-ms": "500",
        "x-fake-token-delay-ms": "150",
    }
    stream = OpenStream(base_url, "/v1/chat/completions", chat_body(stream=True), headers)
    try:
        times = [stream.next_event()[0] for _ in range(1 + 3 + 1)]
    finally:
        stream.close()
    # Lower bounds from the start only: the sleeps guarantee them, and a busy machine only adds
    # to them (gaps between two reads are not: a late read shortens the gap after it).
    role_at, *token_at, _done_at = times
    assert role_at >= 0.5
    assert all(at >= 0.5 + 0.14 * (k + 1) for k, at in enumerate(token_at)), token_at


def test_headers_go_out_before_the_first_token_wait(base_url: str) -> None:
    """As vLLM's do: the head arrives while the first token is still ten minutes away."""
    headers = {"x-fake-first-token-delay-ms": "600000", "x-request-id": "head-first"}
    stream = OpenStream(base_url, "/v1/chat/completions", chat_body(stream=True), headers)
    try:
        assert stream.resp.status == 200
        assert stream.resp.getheader("content-type", "").startswith("text/event-stream")
    finally:
        stream.close()
    wait_for(lambda: record_of(base_url, "head-first")["state"] == "disconnected", 10.0)


def test_non_stream_waits_for_all_tokens(base_url: str) -> None:
    start = time.monotonic()
    status, _, _ = call(
        base_url,
        "POST",
        "/v1/chat/completions",
        chat_body(),
        {"x-fake-tokens": "4", "x-fake-token-delay-ms": "100"},
    )
    elapsed = time.monotonic() - start
    assert status == 200
    assert elapsed >= 0.39


# --- injected failures --------------------------------------------------------------------------


def test_fail_after_drops_the_connection_mid_stream(base_url: str) -> None:
    headers = {"x-fake-tokens": "5", "x-fake-fail-after": "2", "x-request-id": "abort-1"}
    conn = _connect(base_url)
    try:
        _send(conn, "POST", "/v1/chat/completions", chat_body(stream=True), headers)
        resp = conn.getresponse()
        assert resp.status == 200
        # The body ends without its terminating chunk: http.client reports a truncated read.
        with pytest.raises(http.client.IncompleteRead) as excinfo:
            resp.read()
    finally:
        conn.close()
    partial = excinfo.value.partial
    assert b"[DONE]" not in partial
    chunks = [orjson.loads(event[len(b"data: ") :]) for event in partial.split(b"\n\n") if event]
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": "tok0 "},
        {"content": "tok1 "},
    ]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks)
    record = record_of(base_url, "abort-1")
    assert (record["state"], record["tokens_sent"]) == ("failed", 2)


def test_fail_after_without_stream_is_a_500(base_url: str) -> None:
    status, _, raw = call(base_url, "POST", "/v1/completions", {"prompt": "x"}, {"x-fake-fail-after": "1"})
    assert status == 500
    error = orjson.loads(raw)["error"]
    assert (error["type"], error["code"], error["param"]) == ("InternalServerError", 500, None)


def test_error_event_after_ends_the_stream_like_vllm(base_url: str) -> None:
    body = chat_body(stream=True, stream_options={"include_usage": True})
    headers = {"x-fake-tokens": "5", "x-fake-error-event-after": "2", "x-request-id": "err-1"}
    status, _, raw = call(base_url, "POST", "/v1/chat/completions", body, headers)
    assert status == 200
    payloads = sse_payloads(raw)
    head = head_of(orjson.loads(payloads[0]))
    error = {
        "message": "fake worker: injected error after 2 tokens",
        "type": "InternalServerError",
        "param": None,
        "code": 500,
    }
    assert payloads[1:] == [
        chat_chunk(head, {"content": "tok0 "}),
        chat_chunk(head, {"content": "tok1 "}),
        # vLLM writes this event with json.dumps, spaces included.
        json.dumps({"error": error}).encode(),
        b"[DONE]",
    ]
    assert record_of(base_url, "err-1")["state"] == "failed"


@pytest.mark.parametrize(
    ("code", "err_type", "retry_after"),
    [
        (429, "RateLimitError", True),
        (503, "ServiceUnavailableError", True),
        (400, "BadRequestError", False),
        (500, "InternalServerError", False),
    ],
)
def test_fake_status(base_url: str, code: int, err_type: str, retry_after: bool) -> None:
    status, headers, raw = call(
        base_url,
        "POST",
        "/v1/chat/completions",
        chat_body(stream=True),
        {"x-fake-status": str(code), "x-request-id": f"status-{code}"},
    )
    assert status == code
    assert headers["content-type"] == "application/json"
    assert headers["x-request-id"] == f"status-{code}"
    message = f"fake worker: injected status {code}"
    assert orjson.loads(raw) == {"error": {"message": message, "type": err_type, "param": None, "code": code}}
    assert headers.get("retry-after") == ("1" if retry_after else None)
    record = record_of(base_url, f"status-{code}")
    assert (record["state"], record["status"]) == ("failed", code)


# --- the client going away ----------------------------------------------------------------------


def test_worker_sees_a_client_leave_mid_stream(base_url: str) -> None:
    # 100,000 tokens 50 ms apart: it never ends by itself while the test runs.
    headers = {"x-fake-tokens": "100000", "x-fake-token-delay-ms": "50", "x-request-id": "leave-1"}
    stream = OpenStream(base_url, "/v1/chat/completions", chat_body(stream=True), headers)
    try:
        for _ in range(3):
            stream.next_event()
        assert record_of(base_url, "leave-1")["state"] == "running"
    finally:
        stream.close()
    wait_for(lambda: record_of(base_url, "leave-1")["state"] == "disconnected", 10.0)
    sent = record_of(base_url, "leave-1")["tokens_sent"]
    assert 2 <= sent < 100000
    time.sleep(0.2)
    # Generation stopped: nothing more was produced after the client left.
    assert record_of(base_url, "leave-1")["tokens_sent"] == sent


def test_hold_after_sends_that_many_tokens_then_holds_until_the_client_leaves(base_url: str) -> None:
    headers = {"x-fake-tokens": "5", "x-fake-hold-after": "2", "x-request-id": "hold-2"}
    with OpenStream(base_url, "/v1/chat/completions", chat_body(stream=True), headers) as stream:
        events = [orjson.loads(stream.next_event()[1].removeprefix(b"data: ")) for _ in range(3)]
        assert [e["choices"][0]["delta"].get("content") for e in events[1:]] == ["tok0 ", "tok1 "]
        assert_held_then_left(base_url, "hold-2", 2, stream)


def test_hold_after_all_the_tokens_holds_before_the_end(base_url: str) -> None:
    headers = {"x-fake-tokens": "2", "x-fake-hold-after": "9", "x-request-id": "hold-9"}
    with OpenStream(base_url, "/v1/chat/completions", chat_body(stream=True), headers) as stream:
        events = [orjson.loads(stream.next_event()[1].removeprefix(b"data: ")) for _ in range(3)]
        assert events[-1]["choices"][0]["finish_reason"] == "stop"  # the last token chunk
        assert_held_then_left(base_url, "hold-9", 2, stream)  # no usage, no [DONE] yet


@pytest.mark.parametrize("stream", [True, False])
def test_stall_never_answers_until_the_client_leaves(base_url: str, stream: bool) -> None:
    request_id = f"stall-{stream}"
    conn = _connect(base_url, timeout=0.3)
    try:
        headers = {"x-fake-stall": "1", "x-request-id": request_id}
        _send(conn, "POST", "/v1/chat/completions", chat_body(stream=stream), headers)
        with pytest.raises(TimeoutError):
            conn.getresponse()
        assert record_of(base_url, request_id)["state"] == "running"
    finally:
        conn.close()
    wait_for(lambda: record_of(base_url, request_id)["state"] == "disconnected", 10.0)


def test_non_stream_client_leaving_during_delay_is_seen(base_url: str) -> None:
    conn = _connect(base_url, timeout=0.2)
    try:
        headers = {"x-fake-tokens": "1000", "x-fake-token-delay-ms": "1000", "x-request-id": "leave-2"}
        _send(conn, "POST", "/v1/completions", {"prompt": "hi"}, headers)
        with pytest.raises(TimeoutError):
            conn.getresponse()
    finally:
        conn.close()
    wait_for(lambda: record_of(base_url, "leave-2")["state"] == "disconnected", 10.0)
    assert record_of(base_url, "leave-2")["tokens_sent"] == 0


# --- metrics ------------------------------------------------------------------------------------


def _metric(text: str, name: str, model: str) -> float:
    match = re.search(rf'^{re.escape(name)}{{model_name="{model}"}} (\S+)$', text, re.MULTILINE)
    assert match, f"{name} for {model} missing from:\n{text}"
    return float(match.group(1))


def _metrics(base_url: str) -> str:
    status, headers, raw = call(base_url, "GET", "/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain")
    return raw.decode()


def test_metrics_count_in_flight_generations(base_url: str) -> None:
    running = "vllm:num_requests_running"
    assert _metric(_metrics(base_url), running, OTHER) == 0.0
    headers = {"x-fake-tokens": "40", "x-fake-hold-after": "1"}  # in flight until the client leaves
    body = {"model": OTHER, "prompt": "slow", "stream": True}
    stream = OpenStream(base_url, "/v1/completions", body, headers)
    try:
        stream.next_event()
        text = _metrics(base_url)
        assert _metric(text, running, OTHER) == 1.0
        assert _metric(text, running, MODEL) == 0.0
        assert _metric(text, "vllm:num_requests_waiting", OTHER) == 0.0
        assert _metric(text, "vllm:kv_cache_usage_perc", OTHER) == 0.0
    finally:
        stream.close()
    wait_for(lambda: _metric(_metrics(base_url), running, OTHER) == 0.0, 10.0)


# --- errors -------------------------------------------------------------------------------------


def test_unknown_model_is_a_404(base_url: str) -> None:
    status, _, raw = call(base_url, "POST", "/v1/chat/completions", {**chat_body(), "model": "nope"})
    assert status == 404
    assert orjson.loads(raw) == {
        "error": {
            "message": "The model `nope` does not exist.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
    }


@pytest.mark.parametrize(
    ("path", "body", "headers", "param"),
    [
        ("/v1/chat/completions", b"{not json", {}, None),
        ("/v1/chat/completions", b"[1, 2]", {}, None),
        ("/v1/chat/completions", {"model": MODEL}, {}, "messages"),
        ("/v1/completions", {"model": MODEL}, {}, "prompt"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}, {}, "max_tokens"),
        ("/v1/completions", {"prompt": "x"}, {"x-fake-tokens": "many"}, "x-fake-tokens"),
        ("/v1/embeddings", {"input": 3}, {}, "input"),
    ],
)
def test_bad_requests_are_400s(
    base_url: str, path: str, body: Any, headers: dict[str, str], param: str | None
) -> None:
    status, _, raw = call(base_url, "POST", path, body, {**headers, "x-request-id": "bad-1"})
    assert status == 400
    error = orjson.loads(raw)["error"]
    assert (error["type"], error["param"], error["code"]) == ("BadRequestError", param, 400)
    assert isinstance(error["message"], str)
    assert record_of(base_url, "bad-1")["state"] == "failed"


# --- embeddings ---------------------------------------------------------------------------------


def test_embeddings_are_deterministic(base_url: str) -> None:
    body = {"model": MODEL, "input": ["the quick fox", "jumps"]}
    status, _, raw = call(base_url, "POST", "/v1/embeddings", body)
    assert status == 200
    answer = orjson.loads(raw)
    assert (answer["object"], answer["model"]) == ("list", MODEL)
    assert answer["usage"]["prompt_tokens"] == 4
    assert answer["usage"]["total_tokens"] == 4
    vectors = [item["embedding"] for item in answer["data"]]
    assert [item["index"] for item in answer["data"]] == [0, 1]
    assert all(item["object"] == "embedding" for item in answer["data"])
    assert all(len(vector) == 8 for vector in vectors)
    assert vectors[0] != vectors[1]
    assert sum(v * v for v in vectors[0]) == pytest.approx(1.0)

    _, _, again = call(base_url, "POST", "/v1/embeddings", {"model": MODEL, "input": "jumps"})
    assert orjson.loads(again)["data"][0]["embedding"] == vectors[1]


# --- tool calls ---------------------------------------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


def test_tool_call_streams_like_vllm(base_url: str) -> None:
    body = chat_body(stream=True, tools=TOOLS, stream_options={"include_usage": True})
    _, _, raw = call(base_url, "POST", "/v1/chat/completions", body, {"x-fake-tool-call": "get_weather"})
    payloads = sse_payloads(raw)
    head = head_of(orjson.loads(payloads[0]))
    start = orjson.loads(payloads[1])["choices"][0]["delta"]["tool_calls"][0]
    assert re.fullmatch(r"chatcmpl-tool-[0-9a-f]{32}", start["id"])
    first_call = {
        "id": start["id"],
        "type": "function",
        "index": 0,
        "function": {"name": "get_weather", "arguments": ""},
    }

    def arguments(fragment: str) -> dict[str, Any]:
        return {"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]}

    assert payloads == [
        chat_chunk(head, {"role": "assistant", "content": ""}),
        chat_chunk(head, {"tool_calls": [first_call]}),
        chat_chunk(head, arguments('{"x": ')),
        chat_chunk(head, arguments("1}"), finish="tool_calls"),
        usage_chunk(head, prompt=4, completion=2),
        b"[DONE]",
    ]


def test_tool_call_without_stream(base_url: str) -> None:
    body = chat_body(tools=TOOLS)
    _, _, raw = call(base_url, "POST", "/v1/chat/completions", body, {"x-fake-tool-call": "get_weather"})
    choice = orjson.loads(raw)["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] is None
    [tool_call] = message["tool_calls"]
    assert tool_call["type"] == "function"
    assert tool_call["function"]["name"] == "get_weather"
    assert json.loads(tool_call["function"]["arguments"]) == {"x": 1}


def test_tool_call_for_an_unoffered_tool_answers_text(base_url: str) -> None:
    _, _, raw = call(
        base_url, "POST", "/v1/chat/completions", chat_body(tools=TOOLS), {"x-fake-tool-call": "nah"}
    )
    choice = orjson.loads(raw)["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["content"].startswith("tok0 ")


# --- request records ----------------------------------------------------------------------------


def test_request_record_shows_what_was_forwarded(base_url: str) -> None:
    body = chat_body(max_tokens=2)
    headers = {"X-Request-Id": "rec-1", "X-Forwarded-Thing": "Yes"}
    call(base_url, "POST", "/v1/chat/completions", body, headers)
    record = record_of(base_url, "rec-1")
    assert record["request_id"] == "rec-1"
    assert record["path"] == "/v1/chat/completions"
    assert record["headers"]["x-forwarded-thing"] == "Yes"
    assert record["headers"]["x-request-id"] == "rec-1"
    assert record["body"] == body
    assert (record["state"], record["tokens_sent"]) == ("completed", 2)


def test_request_without_id_gets_one(base_url: str) -> None:
    _, headers, _ = call(base_url, "POST", "/v1/completions", {"prompt": "x"})
    generated = headers["x-request-id"]
    assert generated
    assert record_of(base_url, generated)["path"] == "/v1/completions"


def test_unknown_record_is_a_404(base_url: str) -> None:
    status, _, raw = call(base_url, "GET", "/fake/requests/never-sent")
    assert status == 404
    assert orjson.loads(raw)["error"]["code"] == 404


def test_records_are_bounded() -> None:
    records = RequestRecords(limit=3)
    for i in range(5):
        records.add(RequestRecord(f"id-{i}", "/p", {}, None))
    assert len(records) == 3
    assert records.get("id-1") is None
    assert records.get("id-4") is not None
    newer = RequestRecord("id-2", "/q", {}, None)
    records.add(newer)
    assert records.get("id-2") is newer
    assert len(records) == 3


# --- the command line ---------------------------------------------------------------------------


def test_module_runs_a_server() -> None:
    port = free_port()
    command = [sys.executable, "-m", "workers.fake", "--port", str(port)]
    command += ["--model", "a", "--model", "b"]
    with subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as proc:
        try:

            def up() -> bool:
                try:
                    return call(f"http://127.0.0.1:{port}", "GET", "/health")[0] == 200
                except OSError:
                    assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                    return False

            wait_for(up, 8.0)
            models = get_json(f"http://127.0.0.1:{port}", "/v1/models")
            assert [m["id"] for m in models["data"]] == ["a", "b"]
        finally:
            proc.terminate()
            proc.wait(timeout=5)
