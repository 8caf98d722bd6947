"""DIS rules (and EP-5, MET-2 under load): a client that leaves mid-generation frees the worker.

Each check starts a long generation (`--worker-long-tokens`, `"ignore_eos": true`, which vLLM honours
and other workers may ignore), waits until `vllm:num_requests_running` shows it, drops the connection,
and requires the load gauges back at their idle value well before the generation would have ended
on its own. How long "on its own" is comes from one reference run of the same request; when that
leaves too little time to tell an abort from a natural end, the rule is reported as not decided.
"""

from __future__ import annotations

import contextlib
import http.client
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from workers.conformance import client
from workers.conformance.checks import RUNNING, load, settled_load
from workers.conformance.client import Worker
from workers.conformance.conftest import CHAT_PATH, Exchanges, chat_body
from workers.conformance.rules import inconclusive, rule

DEADLINE_S = 2.0
"""The longest a worker may take to free a slot after its client left."""
MIN_DECIDABLE_S = 0.2
"""Below this much allowed time the abort cannot be told from the generation ending by itself."""
PROBES = 3
PROBE_TIMEOUT_S = 1.0
"""Kubernetes' default probe timeout; one slow probe of three is tolerated, as a kubelet with the
default failureThreshold (3) would."""


@dataclass(frozen=True, slots=True)
class LongGeneration:
    max_tokens: int
    duration_s: float
    """How long the whole stream took when nobody left."""

    def body(self, model: str, *, stream: bool) -> dict[str, Any]:
        return chat_body(model, max_tokens=self.max_tokens, ignore_eos=True, stream=stream)


@pytest.fixture(scope="module")
def long_generation(worker: Worker, exchanges: Exchanges, pytestconfig: pytest.Config) -> LongGeneration:
    tokens: int = pytestconfig.getoption("--worker-long-tokens")
    limit = exchanges.max_model_len()
    if limit is not None:
        tokens = max(1, min(tokens, limit - 100))
    settled_load(worker)
    started = time.monotonic()
    stream = client.stream_request(
        worker, CHAT_PATH, LongGeneration(tokens, 0).body(worker.model, stream=True)
    )
    duration = time.monotonic() - started
    if stream.reply.status != 200:
        pytest.fail(f"the long reference generation failed: {stream.reply.brief()}")
    return LongGeneration(tokens, duration)


@dataclass(frozen=True, slots=True)
class Poll:
    """One read of the load gauges; the worker rendered it somewhere between `started` and `ended`."""

    started: float
    ended: float
    running: float
    waiting: float


def _poll(worker: Worker) -> Poll:
    started = time.monotonic()
    running, waiting = load(worker)
    return Poll(started, time.monotonic(), running, waiting)


class _Arrivals:
    """When a stream's bytes came, read on a thread of its own while the gauge is polled: a read of
    /metrics made wholly between two of them was made while the generation ran, however slowly
    the machine scrapes. Nothing here depends on how long anything takes."""

    def __init__(self, conn: http.client.HTTPConnection) -> None:
        self.first: float | None = None
        self.last: float | None = None
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(conn,), daemon=True)
        self._thread.start()

    def _read(self, conn: http.client.HTTPConnection) -> None:
        response: http.client.HTTPResponse | None = None
        with contextlib.suppress(OSError, http.client.HTTPException, ValueError, AttributeError):
            response = conn.getresponse()
            while response.read1(65536):
                now = time.monotonic()
                self.first = self.first if self.first is not None else now
                self.last = now
        if response is not None:
            # The response holds its own reference to the socket: left open, it warns at teardown.
            with contextlib.suppress(OSError, ValueError, AttributeError):
                response.close()
        self.ended.set()

    def ran_through(self, poll: Poll) -> bool:
        first, last = self.first, self.last
        return first is not None and last is not None and first <= poll.started and poll.ended <= last

    def join(self) -> None:
        self._thread.join(timeout=10)


def _wait_until_running(
    worker: Worker,
    long: LongGeneration,
    before: float,
    sent_at: float,
    what: str,
    arrivals: _Arrivals | None,
) -> None:
    """MET-2: the gauge shows the generation. For a stream, a read proves the gauge wrong only if
    it was made wholly between two of the stream's chunks (the generation ran all through it);
    the stream is an ignore_eos generation bounded in tokens, far longer than a scrape, and left
    as soon as the gauge shows it. A whole answer shows nothing while it runs, so it can only
    fail to see the gauge (inconclusive): the stream checks decide MET-2."""
    if arrivals is not None:
        missed: list[Poll] = []
        while not arrivals.ended.is_set():
            poll = _poll(worker)
            if poll.running > before:
                return
            missed.append(poll)
            proven = [p for p in missed if arrivals.ran_through(p)]
            rule(
                "MET-2",
                len(proven) < 2,
                f"{what}: {len(proven)} reads of {RUNNING} made while its tokens were arriving all "
                f"showed {before}",
            )
            time.sleep(0.01)
        inconclusive(
            "MET-2",
            f"{what} ended before /metrics was read twice while it streamed (raise --worker-long-tokens)",
        )
    window_end = sent_at + max(0.8 * long.duration_s, 0.5)
    while True:
        poll = _poll(worker)
        if poll.running > before:
            return
        if poll.ended >= window_end:
            break
        time.sleep(0.01)
    inconclusive("MET-2", f"{what}: {RUNNING} was not seen during a whole answer (the stream checks decide)")


def _abandon(
    worker: Worker,
    long: LongGeneration,
    *,
    stream: bool,
    decides: str,
    while_running: Callable[[], None] | None = None,
    judge_the_abort: bool = True,
) -> None:
    """Start a long generation, leave once it runs, and require the worker freed well before its end.

    The worker may render a slow /metrics read at any moment while it is in flight, so a read proves
    the request still held a slot only if it *started* after the deadline.
    """
    rule_id = "DIS-1" if stream else "DIS-2"
    what = f"a {'stream' if stream else 'non-stream'} chat request (max_tokens {long.max_tokens}, ignore_eos)"
    baseline = settled_load(worker)
    running_before = load(worker)[0]
    sent_at = time.monotonic()
    conn: http.client.HTTPConnection = client.send(
        worker, "POST", CHAT_PATH, long.body(worker.model, stream=stream), timeout_s=30
    )
    arrivals: _Arrivals | None = None
    try:
        if long.duration_s < 0.5:
            inconclusive(decides, f"{what} takes only {long.duration_s:.2f}s (raise --worker-long-tokens)")
        arrivals = _Arrivals(conn) if stream else None
        _wait_until_running(worker, long, running_before, sent_at, what, arrivals)
        if while_running is not None:
            while_running()
    finally:
        client.close_abruptly(conn)
        if arrivals is not None:
            arrivals.join()
    if not judge_the_abort:
        return
    left_at = time.monotonic()
    natural_end = sent_at + long.duration_s
    allowed = min(DEADLINE_S, 0.5 * (natural_end - left_at))
    if allowed < MIN_DECIDABLE_S:
        inconclusive(
            decides,
            f"{what} takes {long.duration_s:.2f}s and would end {natural_end - left_at:.2f}s after the "
            "client left; too soon to tell an abort from a natural end (raise --worker-long-tokens)",
        )
    deadline = left_at + allowed
    while True:
        poll = _poll(worker)
        if poll.running + poll.waiting <= baseline:
            if poll.started >= natural_end:
                inconclusive(decides, f"/metrics answered too slowly to see {what} freed before its end")
            return
        rule(
            rule_id,
            poll.started < deadline,
            f"{what} abandoned {left_at - sent_at:.2f}s after it was sent: expected running + waiting back "
            f"to {baseline} within {allowed:.2f}s (the generation alone takes {long.duration_s:.2f}s), saw "
            f"running {poll.running}, waiting {poll.waiting} {poll.started - left_at:.2f}s after it left",
        )
        time.sleep(0.01)


@pytest.mark.rules("DIS-1", "MET-2")
def test_a_stream_whose_client_leaves_stops(worker: Worker, long_generation: LongGeneration) -> None:
    _abandon(worker, long_generation, stream=True, decides="DIS-1")


@pytest.mark.rules("DIS-2", "MET-2")
def test_a_whole_answer_whose_client_leaves_stops(worker: Worker, long_generation: LongGeneration) -> None:
    _abandon(worker, long_generation, stream=False, decides="DIS-2")


@pytest.mark.rules("EP-5")
def test_health_answers_while_generating(worker: Worker, long_generation: LongGeneration) -> None:
    seen: list[str] = []

    def probe() -> None:
        for _ in range(PROBES):
            try:
                reply = client.get(worker, "/health", timeout_s=PROBE_TIMEOUT_S)
            except OSError as exc:
                seen.append(f"no answer ({exc!r})")
                continue
            ok = reply.status == 200 and reply.elapsed_s <= PROBE_TIMEOUT_S
            seen.append(
                f"{'ok' if ok else 'late or not 200'}: {reply.brief(60)} after {reply.elapsed_s:.2f}s"
            )
            time.sleep(0.1)

    _abandon(worker, long_generation, stream=True, decides="EP-5", while_running=probe, judge_the_abort=False)
    failed = [answer for answer in seen if not answer.startswith("ok")]
    rule(
        "EP-5",
        len(failed) < 2,
        f"{PROBES} probes of GET /health during a generation: expected 200 within {PROBE_TIMEOUT_S:.0f} s "
        f"(at most one slow one), saw {seen}",
    )
