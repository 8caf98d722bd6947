"""Stopping a gateway the way Kubernetes does (SIGTERM), with real `python -m gateway serve`
processes: /readyz fails at once while requests are still served, open streams finish, streams the
drain cannot wait for end in their API's shape and are metered as relayed, and two gateways
restarted one after the other under load fail no request. Exit status 0, no traceback.

Nothing here waits on a stopwatch: a worker that must still be streaming is held open by the test
until the test releases it, and the long delays are long enough never to run out by themselves
(a second signal ends them)."""

from __future__ import annotations

import http.client
import json
import random
import signal
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import pytest

from gateway.dev.embedded_redis import EmbeddedRedis
from tests.adversarial.scripted import (
    MODEL,
    held_stream,
    run_scripted,
)
from tests.conftest import FAKE_MODEL, worker_record
from tests.faults.conftest import GatewayProcess, StartGateway

pytestmark = pytest.mark.timeout(180)
WAIT_S = 60.0
FOREVER = "600"  # a delay or drain that never runs out during a test: a second signal ends it


def _models(url: str) -> str:
    return f"models:\n  - name: {MODEL}\n    endpoints: [{{url: '{url}'}}]\n"


class Stream:
    """A streaming chat request on its own connection, read line by line."""

    def __init__(self, gw: GatewayProcess, key: str, model: str = MODEL, **headers: str) -> None:
        parts = urlsplit(gw.url)
        assert parts.hostname is not None
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=WAIT_S)
        body = {"model": model, "stream": True, "messages": [{"role": "user", "content": "a b"}]}
        self.conn.request(
            "POST",
            "/v1/chat/completions",
            body=json.dumps(body),
            headers={"authorization": f"Bearer {key}", "connection": "close", **headers},
        )
        self.response = self.conn.getresponse()
        assert self.response.status == 200
        self.data: list[Any] = []

    def read_until(self, count: int) -> None:
        while len(self.data) < count:
            self._next()

    def read_all(self) -> list[Any]:
        while not self.data or self.data[-1] != "[DONE]":
            self._next()
        assert self.response.read().strip() == b""  # nothing after [DONE] but its blank line
        self.conn.close()
        return self.data

    def _next(self) -> None:
        line = self.response.readline()
        assert line, f"the stream ended without [DONE] after {self.data}"
        if line.startswith(b"data: "):
            payload = line[6:].strip()
            self.data.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))


def _text(data: list[Any]) -> str:
    return "".join(
        c["choices"][0]["delta"].get("content") or ""
        for c in data
        if isinstance(c, dict) and c.get("choices")
    )


def _ready(gw: GatewayProcess) -> int:
    parts = urlsplit(gw.url)
    assert parts.hostname is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status
    finally:
        conn.close()


def _wait(check: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _exits_cleanly(gw: GatewayProcess) -> None:
    assert gw.process.wait(timeout=WAIT_S) == 0, gw.log()
    log = gw.log()
    assert "Traceback" not in log, log
    assert "Application shutdown complete" in log, log


def _stop_now(gw: GatewayProcess) -> None:
    """SIGTERM, then (once it was taken: two at once would be one) a second to skip the delay."""
    gw.process.send_signal(signal.SIGTERM)
    _wait(lambda: _ready(gw) == 503, "/readyz never failed after SIGTERM")
    gw.process.send_signal(signal.SIGTERM)
    _exits_cleanly(gw)


def _rows(redis: EmbeddedRedis, start_gateway: StartGateway, team: str) -> list[dict[str, Any]]:
    """The team's usage, read through a fresh gateway on the same Redis."""
    reader = start_gateway(redis.url)
    try:
        rows: list[dict[str, Any]] = []
        deadline = time.monotonic() + WAIT_S
        while not rows and time.monotonic() < deadline:
            rows = reader.usage(team)
            time.sleep(0.05)
        return rows
    finally:
        reader.stop()


@pytest.fixture
def team() -> str:
    return f"drain-{random.randrange(1 << 30)}"


def test_readyz_fails_at_once_while_requests_are_still_served(
    redis_server: EmbeddedRedis, start_gateway: StartGateway, team: str
) -> None:
    gw = start_gateway(redis_server.url, SLUICEGATE_SHUTDOWN_DELAY=FOREVER)
    gw.admin.call("POST", "/admin/v1/teams", {"name": team})
    key = gw.new_key(team)["key"]
    assert _ready(gw) == 200
    gw.process.send_signal(signal.SIGTERM)
    _wait(lambda: _ready(gw) == 503, "/readyz never failed after SIGTERM")
    # Still listening and serving, as Kubernetes may route to the pod until its endpoints update.
    data = Stream(gw, key, model=FAKE_MODEL, **{"x-fake-tokens": "4"}).read_all()
    assert _text(data) == "tok0 tok1 tok2 tok3 "
    assert gw.alive()
    gw.process.send_signal(signal.SIGTERM)  # a second signal cuts the delay short
    _exits_cleanly(gw)


def test_a_stream_open_at_sigterm_completes_with_all_its_tokens(
    redis_server: EmbeddedRedis, start_gateway: StartGateway, team: str
) -> None:
    released = threading.Event()
    with run_scripted(held_stream(released, WAIT_S)) as worker:
        gw = start_gateway(
            redis_server.url,
            models=_models(worker.url),
            SLUICEGATE_SHUTDOWN_DELAY="0",
            SLUICEGATE_DRAIN_TIMEOUT=FOREVER,
        )
        gw.admin.call("POST", "/admin/v1/teams", {"name": team})
        stream = Stream(gw, gw.new_key(team)["key"])
        stream.read_until(3)
        gw.process.send_signal(signal.SIGTERM)
        _wait(lambda: "draining open requests" in gw.log(), "the gateway never began draining")
        released.set()  # only now may the stream go on
        data = stream.read_all()
        assert _text(data) == "t0 t1 t2 t3 t4 t5 "
        _exits_cleanly(gw)
    (row,) = _rows(redis_server, start_gateway, team)
    assert (row["requests"], row["completion_tokens"], row["errors"]) == (1, 6, 0)


@pytest.mark.parametrize("how", ["drain timeout", "second signal"])
def test_a_stream_the_drain_cannot_wait_for_ends_with_an_error_event_and_done(
    redis_server: EmbeddedRedis, start_gateway: StartGateway, team: str, how: str
) -> None:
    released = threading.Event()  # not set until the end: the worker holds the stream forever
    with run_scripted(held_stream(released, WAIT_S)) as worker:
        timeout = "0.2" if how == "drain timeout" else FOREVER
        gw = start_gateway(
            redis_server.url,
            models=_models(worker.url),
            SLUICEGATE_SHUTDOWN_DELAY="0",
            SLUICEGATE_DRAIN_TIMEOUT=timeout,
        )
        gw.admin.call("POST", "/admin/v1/teams", {"name": team})
        stream = Stream(gw, gw.new_key(team)["key"])
        stream.read_until(3)
        gw.process.send_signal(signal.SIGTERM)
        if how == "second signal":
            _wait(lambda: "draining open requests" in gw.log(), "the gateway never began draining")
            gw.process.send_signal(signal.SIGTERM)
        data = stream.read_all()
        assert _text(data) == "t0 t1 t2 "
        error = data[-2]
        assert error["error"]["code"] == "shutting_down", data
        assert worker.gateway_closed.wait(WAIT_S), "the worker's connection was kept open"
        _exits_cleanly(gw)
        released.set()  # lets the worker's script end (its write now goes nowhere)
    (row,) = _rows(redis_server, start_gateway, team)
    # Metered as relayed: the worker's own count at the last chunk the client got.
    assert (row["requests"], row["prompt_tokens"], row["completion_tokens"]) == (1, 2, 3)


def test_a_request_not_yet_answered_when_the_drain_runs_out_gets_a_503(
    redis_server: EmbeddedRedis, start_gateway: StartGateway, fake_worker: str, team: str
) -> None:
    gw = start_gateway(redis_server.url, SLUICEGATE_SHUTDOWN_DELAY="0", SLUICEGATE_DRAIN_TIMEOUT=FOREVER)
    gw.admin.call("POST", "/admin/v1/teams", {"name": team})
    key = gw.new_key(team)["key"]
    parts = urlsplit(gw.url)
    assert parts.hostname is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=WAIT_S)
    body = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "x"}]}
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps(body),
        headers={"authorization": f"Bearer {key}", "x-fake-stall": "1", "x-request-id": f"stall-{team}"},
    )
    _wait(
        lambda: worker_record(fake_worker, f"stall-{team}") is not None,
        "the request never reached the worker",
    )
    gw.process.send_signal(signal.SIGTERM)
    _wait(lambda: "draining open requests" in gw.log(), "the gateway never began draining")
    gw.process.send_signal(signal.SIGTERM)
    response = conn.getresponse()
    assert response.status == 503
    assert json.loads(response.read())["error"]["code"] == "shutting_down"
    assert response.getheader("retry-after") == "1"
    conn.close()
    _exits_cleanly(gw)


class Service:
    """What a Kubernetes Service does for the clients: the ready backends, replaced as a whole."""

    def __init__(self, urls: list[str], clients: int) -> None:
        self.backends = tuple(urls)
        self.finished = [0] * clients  # requests each client has finished: proof it moved on


def _load(service: Service, me: int, key: str, stop: threading.Event, results: list[str]) -> None:
    """A client that retries only connection errors: each request on a new connection (so an
    idle keep-alive connection closing cannot look like a failed request)."""
    while not stop.is_set():
        for attempt in range(50):
            parts = urlsplit(random.choice(service.backends))
            assert parts.hostname is not None
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=WAIT_S)
            try:
                conn.connect()
            except ConnectionRefusedError:
                conn.close()
                time.sleep(0.01 * attempt)
                continue
            try:
                body = {"model": FAKE_MODEL, "stream": True, "messages": [{"role": "user", "content": "x"}]}
                conn.request(
                    "POST",
                    "/v1/chat/completions",
                    body=json.dumps(body),
                    headers={
                        "authorization": f"Bearer {key}",
                        "connection": "close",
                        "x-fake-tokens": "5",
                        "x-fake-token-delay-ms": "20",
                    },
                )
                response = conn.getresponse()
                raw = response.read()
                ok = response.status == 200 and raw.rstrip().endswith(b"data: [DONE]") and b"tok4" in raw
                results.append("ok" if ok else f"{response.status} {raw[-200:]!r}")
            except (OSError, http.client.HTTPException) as exc:
                results.append(f"failed: {type(exc).__name__}")
            finally:
                conn.close()
            break
        else:
            results.append("no backend accepted a connection")
        service.finished[me] += 1


def test_two_gateways_restarted_one_after_the_other_under_load_fail_no_request(
    redis_server: EmbeddedRedis, start_gateway: StartGateway, team: str
) -> None:
    """A rolling update: a new pod first, then the old one gets SIGTERM; once it is not ready the
    Service stops sending it new connections (here: once every client has moved on), and the end
    of its shutdown delay (here: a second signal) is when it stops listening and drains."""
    settings = {"SLUICEGATE_SHUTDOWN_DELAY": FOREVER, "SLUICEGATE_DRAIN_TIMEOUT": "30"}
    gateways = [start_gateway(redis_server.url, **settings) for _ in range(2)]
    gateways[0].admin.call("POST", "/admin/v1/teams", {"name": team})
    key = gateways[0].new_key(team)["key"]
    service = Service([gw.url for gw in gateways], clients=4)
    stop = threading.Event()
    results: list[str] = []
    clients = [
        threading.Thread(target=_load, args=(service, me, key, stop, results))
        for me in range(len(service.finished))
    ]
    for client in clients:
        client.start()
    try:
        for i, old in enumerate(list(gateways)):
            _wait(lambda want=10 * (i + 1): len(results) >= want, "the load stopped")
            new = start_gateway(redis_server.url, **settings)
            service.backends = (*service.backends, new.url)
            old.process.send_signal(signal.SIGTERM)
            _wait(lambda old=old: _ready(old) == 503, "/readyz never failed after SIGTERM")
            # Now the endpoints controller takes the pod out of the Service.
            service.backends = tuple(url for url in service.backends if url != old.url)
            marks = list(service.finished)
            _wait(
                lambda marks=marks: all(n > m for n, m in zip(service.finished, marks, strict=True)),
                "a client stopped",
            )
            old.process.send_signal(signal.SIGTERM)  # the delay is over: stop listening, drain
            _exits_cleanly(old)
            gateways[i] = new
        served = len(results)
        _wait(lambda: len(results) >= served + 10, "the load stopped after the restarts")
    finally:
        stop.set()
        for client in clients:
            client.join(WAIT_S)
    failures = [r for r in results if r != "ok"]
    assert not failures, failures[:5]
    # Each metered exactly once, whichever process served it.
    _wait(lambda: sum(r["requests"] for r in gateways[0].usage(team)) >= len(results), "usage is missing")
    assert sum(r["requests"] for r in gateways[0].usage(team)) == len(results)
    for gw in gateways:
        _stop_now(gw)
