"""What the pipeline tests share: reading /metrics and usage, checking error envelopes, and one
HTTP request on a connection of its own that the test can hang up on whenever it likes."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

from gateway.model_table import HealthConfig, ModelConfig, ModelTable, Timeouts
from tests.conftest import Gateway
from tests.http import Reply, get
from tests.pipeline.hostile import MODE_HEADER, MODEL
from tests.waiting import wait_until

HELLO = [{"role": "user", "content": "hi there"}]
CHAT = "/v1/chat/completions"
ENVELOPE_FIELDS = {"message", "type", "param", "code"}
MAX_MESSAGE = 1024
DEADLINE_S = 20.0


def chat(model: str, *, stream: bool = False, **fields: Any) -> dict[str, Any]:
    return {"model": model, "messages": HELLO, "stream": stream, **fields}


def hostile_headers(mode: str) -> dict[str, str]:
    return {MODE_HEADER: mode}


def hostile_table(urls: tuple[str, ...]) -> ModelTable:
    """The hostile worker as one model; ejection is out of the way (a test's failures must not
    turn its later requests into 503s), timeouts are generous but finite."""
    return ModelTable(
        (
            ModelConfig(
                name=MODEL,
                endpoints=urls,
                timeouts=Timeouts(connect=2, first_token=20, idle=20, total=20),
                health=HealthConfig(failures_to_eject=1000),
            ),
        )
    )


# --- /metrics -----------------------------------------------------------------------------------


def metric_samples(gw: Gateway, name: str) -> list[tuple[dict[str, str], float]]:
    reply = get(f"{gw.url}/metrics")
    assert reply.status == 200, f"/metrics answered {reply.status}"
    return [
        (dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(reply.body.decode())
        for sample in family.samples
        if sample.name == name
    ]


def metric_sum(gw: Gateway, name: str, **labels: str) -> float | None:
    """The sum of `name`'s samples whose labels include `labels`; None when there is none."""
    values = [v for found, v in metric_samples(gw, name) if labels.items() <= found.items()]
    return sum(values) if values else None


def inflight(gw: Gateway, model: str | None = None) -> float | None:
    labels = {"model": model} if model else {}
    return metric_sum(gw, "sluicegate_inflight_requests", **labels)


def wait_inflight_zero(gw: Gateway, model: str | None = None) -> None:
    """For one model, its gauge must be there and 0; over all models (None), no sample is 0 too."""

    def zero() -> bool:
        value = inflight(gw, model)
        return value == 0 or (model is None and value is None)

    if not _eventually(zero):
        raise AssertionError(
            f"sluicegate_inflight_requests{{model={model!r}}} stayed at {inflight(gw, model)!r} after "
            "the request ended: dashboards would show a request in flight forever"
        )


# --- usage ----------------------------------------------------------------------------------------

COUNTERS = ("requests", "errors", "disconnects", "prompt_tokens", "completion_tokens")


def usage_totals(gw: Gateway, team: str) -> dict[str, int]:
    """The team's usage summed over its rows (keys, models, days)."""
    rows = gw.usage(team)
    return {name: sum(int(row.get(name, 0)) for row in rows) for name in COUNTERS}


def wait_requests_metered(gw: Gateway, team: str, requests: int) -> dict[str, int]:
    """Waits (bounded) until the team's usage counts `requests` requests, then checks it is not more."""
    if not _eventually(lambda: usage_totals(gw, team)["requests"] >= requests):
        raise AssertionError(
            f"usage never showed {requests} request(s) (it shows {usage_totals(gw, team)}): "
            "a request went unbilled"
        )
    totals = usage_totals(gw, team)
    assert totals["requests"] == requests, (
        f"usage shows {totals['requests']} requests where {requests} were made: a request was billed twice"
    )
    return totals


def _eventually(check: Any) -> bool:
    try:
        wait_until(check, DEADLINE_S, "")
    except AssertionError:
        return False
    return True


# --- error envelopes ------------------------------------------------------------------------------


def envelope(reply: Reply, status: int, code: str | None = None) -> dict[str, Any]:
    """Checks that `reply` is `status` with exactly the gateway's OpenAI error envelope; returns
    its `error` object."""
    shown = reply.body[:300]
    assert reply.status == status, f"the client got HTTP {reply.status}, not {status}: {shown!r}"
    try:
        body = json.loads(reply.body)
    except ValueError:
        raise AssertionError(f"the client got an error body that is not JSON: {shown!r}") from None
    assert isinstance(body, dict), f"the error body is not an object: {shown!r}"
    assert set(body) == {"error"}, f"the error body has fields {sorted(body)}, not just 'error': {shown!r}"
    error = body["error"]
    assert isinstance(error, dict), f"'error' is not the envelope object an SDK expects: {shown!r}"
    assert set(error) == ENVELOPE_FIELDS, f"the envelope has fields {sorted(error)}: {shown!r}"
    assert isinstance(error["message"], str), f"the message is not a string: {shown!r}"
    assert error["message"], "the error message is empty"
    assert len(error["message"]) <= MAX_MESSAGE, (
        f"the error message is {len(error['message'])} characters long: the worker's raw text was relayed"
    )
    assert isinstance(error["type"], str), f"the error type is not a string: {shown!r}"
    assert error["code"] is None or isinstance(error["code"], str), (
        f"the error code is {error['code']!r}, not a string or null as OpenAI clients expect"
    )
    if code is not None:
        assert error["code"] == code, f"the error code is {error['code']!r}, not {code!r}"
    return error


# --- a request the test can hang up on ------------------------------------------------------------


class OpenRequest:
    """One POST on its own connection. `close()` hangs up for real (FIN), at any point."""

    def __init__(
        self, base_url: str, body: dict[str, Any], *, key: str, headers: dict[str, str] | None = None
    ) -> None:
        parts = urlsplit(base_url)
        assert parts.hostname is not None
        assert parts.port is not None
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=DEADLINE_S)
        self.conn.connect()
        assert self.conn.sock is not None
        self.sock: socket.socket = self.conn.sock
        all_headers = {
            "content-type": "application/json",
            "authorization": f"Bearer {key}",
            **(headers or {}),
        }
        self.conn.request("POST", CHAT, body=json.dumps(body).encode(), headers=all_headers)
        self._response: http.client.HTTPResponse | None = None

    def answered(self) -> bool:
        """Whether some bytes of the answer, or the connection's end, have arrived (never blocks)."""
        if self._response is not None:
            return True
        self.sock.setblocking(False)
        try:
            self.sock.recv(1, socket.MSG_PEEK)
            return True
        except BlockingIOError:
            return False
        finally:
            self.sock.setblocking(True)
            self.sock.settimeout(DEADLINE_S)

    def response(self) -> http.client.HTTPResponse:
        if self._response is None:
            self._response = self.conn.getresponse()
        return self._response

    def events(self) -> Iterator[bytes]:
        """The SSE data payloads, as they arrive."""
        response = self.response()
        while True:
            line = response.readline()
            if not line:
                return
            if line.startswith(b"data: "):
                yield line[6:].rstrip(b"\r\n")

    def read_content_events(self, count: int) -> None:
        """Reads until `count` events carrying generated text have arrived."""
        seen = 0
        for data in self.events():
            if b'"content":"tok' in data or b'"content": "tok' in data:
                seen += 1
                if seen == count:
                    return
        raise AssertionError(f"the stream ended after {seen} content events, before {count}")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        if self._response is not None:
            self._response.close()
        self.conn.close()
        self.sock.close()
