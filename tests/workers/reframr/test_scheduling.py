"""One generation at a time, the bounded queue, disconnects, load metrics, buffered streaming and
engine loading, seen from real clients of a real server."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest

from tests.servers import run_uvicorn
from tests.workers.reframr.support import MODEL, call, chat, connect, metric, send, sse_chunks, wait_for
from workers.reframr import create_app
from workers.reframr.deterministic import DeterministicEngine, TextOnly
from workers.reframr.engine import Engine, EngineLoader

pytestmark = pytest.mark.timeout(10)


class Pending:
    """A request sent on its own connection, answered (or abandoned) later."""

    def __init__(self, base_url: str, body: Any) -> None:
        self.conn = connect(base_url)
        send(self.conn, "/v1/chat/completions", body)
        self._resp: http.client.HTTPResponse | None = None

    @property
    def resp(self) -> http.client.HTTPResponse:
        if self._resp is None:
            self._resp = self.conn.getresponse()
        return self._resp

    def result(self) -> tuple[int, bytes]:
        try:
            return self.resp.status, self.resp.read()
        finally:
            self.conn.close()

    def close(self) -> None:
        if self._resp is not None:
            self._resp.close()
        self.conn.close()


def load(url: str) -> tuple[float | None, float | None]:
    running = metric(url, "vllm:num_requests_running", model_name=MODEL)
    waiting = metric(url, "vllm:num_requests_waiting", model_name=MODEL)
    return running, waiting


@pytest.fixture
def pending() -> Iterator[Callable[..., Pending]]:
    """Opens requests that are closed after the test, however it ends: no socket outlives it."""
    opened: list[Pending] = []

    def open_request(base_url: str, body: Any) -> Pending:
        opened.append(Pending(base_url, body))
        return opened[-1]

    yield open_request
    for request in opened:
        request.close()


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # never leave an engine thread waiting


def test_full_queue_answers_429_with_retry_after(
    gate: threading.Event, pending: Callable[..., Pending]
) -> None:
    engine = DeterministicEngine(gate=gate)
    with run_uvicorn(create_app(engine, MODEL, max_queue=1)) as url:
        first = pending(url, chat("first"))
        wait_for(lambda: load(url) == (1, 0))
        second = pending(url, chat("second", stream=True))
        wait_for(lambda: load(url) == (1, 1))
        status, headers, raw = call(
            url, "POST", "/v1/chat/completions", chat("third"), {"x-request-id": "r3"}
        )
        assert status == 429
        assert headers["retry-after"] == "1"
        assert headers["x-request-id"] == "r3"
        error = orjson.loads(raw)["error"]
        assert (error["type"], error["code"]) == ("RateLimitError", 429)
        gate.set()
        assert first.result()[0] == 200
        status, body = second.result()
        assert status == 200
        assert sse_chunks(body)
        assert [r.context.split("\n")[0] for r in engine.calls] == ["User: first", "User: second"]
        # The answer reaches the client before the worker's bookkeeping of it ends: wait, no race.
        wait_for(lambda: load(url) == (0, 0))


def test_queued_clients_that_left_are_never_run(
    gate: threading.Event, pending: Callable[..., Pending]
) -> None:
    engine = DeterministicEngine(gate=gate)
    with run_uvicorn(create_app(engine, MODEL, max_queue=4)) as url:
        running = pending(url, chat("running"))
        wait_for(lambda: load(url) == (1, 0))
        leaves = pending(url, chat("leaves"))
        leaves_streaming = pending(url, chat("leaves streaming", stream=True))
        stays = pending(url, chat("stays"))
        wait_for(lambda: load(url) == (1, 3))
        assert leaves_streaming.resp.status == 200  # stream headers go out at admission
        leaves.close()
        leaves_streaming.close()
        wait_for(lambda: load(url) == (1, 1))
        gate.set()
        assert running.result()[0] == 200
        assert stays.result()[0] == 200
        wait_for(lambda: load(url) == (0, 0))
        assert [r.context for r in engine.calls] == [
            "User: running\n\nAssistant:",
            "User: stays\n\nAssistant:",
        ]


@pytest.mark.parametrize("stream", [True, False])
def test_disconnect_stops_a_running_generation(stream: bool, pending: Callable[..., Pending]) -> None:
    # 100 s if left alone, far past this module's 10 s timeout: only the stop can complete the test.
    engine = DeterministicEngine(answer_tokens=200, token_delay_s=0.5)
    with run_uvicorn(create_app(engine, MODEL)) as url:
        request = pending(url, chat("long", stream=stream))
        if stream:
            for _ in range(3):  # the role chunk and two tokens have arrived
                assert request.resp.readline().startswith(b"data: ")
                assert request.resp.readline() == b"\n"
        else:
            wait_for(lambda: bool(engine.calls) and engine.calls[0].tokens >= 2)
        request.close()
        wait_for(lambda: load(url) == (0, 0), timeout_s=8.0)
        record = engine.calls[0]
        wait_for(lambda: record.closed, timeout_s=8.0)
        assert not record.completed
        assert record.tokens < 200


def test_one_generation_at_a_time_even_after_a_client_left(pending: Callable[..., Pending]) -> None:
    """A buffered engine cannot be interrupted: the next request waits for it to really finish."""
    spans: list[tuple[float, float]] = []
    # The first generation runs until the test lets it end, however slow the machine: the slot
    # cannot free itself while the test looks.
    gate = threading.Event()

    class Timed(TextOnly):
        def generate_text(self, *args: Any, **kwargs: Any) -> str:
            start = time.monotonic()
            try:
                if not spans:
                    gate.wait(30)
                return super().generate_text(*args, **kwargs)
            finally:
                spans.append((start, time.monotonic()))

    engine = Timed(DeterministicEngine(answer_tokens=10, token_delay_s=0.03))
    with run_uvicorn(create_app(engine, MODEL)) as url:
        leaving = pending(url, chat("leaving"))
        wait_for(lambda: load(url) == (1, 0))
        queued = pending(url, chat("queued"))
        wait_for(lambda: load(url) == (1, 1))
        try:
            leaving.close()
            time.sleep(0.3)  # time to see the client leave (were it seen later, this would prove less)
            assert load(url) == (1, 1), "the slot must stay taken while the engine thread still runs"
        finally:
            gate.set()  # never leave the engine thread waiting: the server's shutdown waits for it
        assert queued.result()[0] == 200
    assert len(spans) == 2
    assert spans[0][1] <= spans[1][0]


def test_buffered_streaming_is_reported_and_ttft_is_the_generation_time() -> None:
    engine = TextOnly(DeterministicEngine(answer_tokens=10, token_delay_s=0.03))  # 0.3 s per answer
    with run_uvicorn(create_app(engine, MODEL)) as url:
        assert metric(url, "reframr_streaming_mode", model_name=MODEL, mode="buffered") == 1
        assert metric(url, "reframr_streaming_mode", model_name=MODEL, mode="token") == 0
        status, headers, raw = call(url, "POST", "/v1/chat/completions", chat("b", stream=True))
        assert status == 200
        assert headers["x-usage-estimated"] == "true"
        chunks = sse_chunks(raw)
        assert len(chunks) > 3  # still cut into chunks, after the fact
        assert "".join(c["choices"][0]["delta"]["content"] for c in chunks).startswith("mode=default b w2")
        assert metric(url, "reframr_time_to_first_token_seconds_count", model_name=MODEL) == 1
        ttft = metric(url, "reframr_time_to_first_token_seconds_sum", model_name=MODEL)
        assert ttft is not None
        assert ttft >= 0.3


def test_token_streaming_ttft_is_the_first_token() -> None:
    engine = DeterministicEngine(answer_tokens=10, token_delay_s=0.03)
    with run_uvicorn(create_app(engine, MODEL)) as url:
        assert call(url, "POST", "/v1/chat/completions", chat("t", stream=True))[0] == 200
        ttft = metric(url, "reframr_time_to_first_token_seconds_sum", model_name=MODEL)
        assert ttft is not None
        assert 0.03 <= ttft < 0.2


def test_health_is_503_until_the_engine_is_loaded() -> None:
    loaded = threading.Event()

    def slow_load() -> Engine:
        loaded.wait(5)
        return DeterministicEngine()

    with run_uvicorn(create_app(EngineLoader(slow_load), MODEL)) as url:
        status, _, raw = call(url, "GET", "/health")
        assert (status, orjson.loads(raw)) == (503, {"status": "loading"})
        status, headers, raw = call(url, "POST", "/v1/chat/completions", chat("early"))
        assert status == 503
        assert headers["retry-after"] == "5"
        assert orjson.loads(raw)["error"]["type"] == "ServiceUnavailableError"
        assert metric(url, "reframr_streaming_mode", model_name=MODEL, mode="token") == 0
        loaded.set()
        wait_for(lambda: call(url, "GET", "/health")[0] == 200)
        assert call(url, "POST", "/v1/chat/completions", chat("late"))[0] == 200


def test_a_failed_load_keeps_health_at_503() -> None:
    def broken() -> Engine:
        raise RuntimeError("weights are corrupt")

    with run_uvicorn(create_app(EngineLoader(broken), MODEL)) as url:
        wait_for(lambda: orjson.loads(call(url, "GET", "/health")[2])["status"] == "failed")
        status, _, raw = call(url, "GET", "/health")
        assert status == 503
        assert "weights are corrupt" in orjson.loads(raw)["error"]
        assert call(url, "POST", "/v1/completions", {"prompt": "x"})[0] == 503


def test_engine_errors() -> None:
    class Broken(TextOnly):
        def generate_text(self, *args: Any, **kwargs: Any) -> str:
            raise ValueError("the answer tables are missing")

    with run_uvicorn(create_app(Broken(DeterministicEngine()), MODEL)) as url:
        status, _, raw = call(url, "POST", "/v1/chat/completions", chat("x"))
        assert status == 500
        assert "answer tables" in orjson.loads(raw)["error"]["message"]
        status, _, raw = call(url, "POST", "/v1/chat/completions", chat("x", stream=True))
        assert status == 200
        events = raw.split(b"\n\n")
        assert orjson.loads(events[0][len(b"data: ") :])["error"]["code"] == 500
        assert events[1:] == [b"data: [DONE]", b""]
        assert load(url) == (0, 0)
