"""The translated Responses stream keeps what it streamed until the end (its `.done` events and
final response repeat it). A worker that ignores its cap must not grow that without bound: past the
bound the stream ends with `response.failed`, counted as the worker's error."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.apis.responses import stream as responses_stream
from tests.conftest import GatewayFactory
from tests.http import post
from tests.pipeline.hostile import MODEL, run_hostile
from tests.pipeline.support import (
    hostile_headers,
    hostile_table,
    metric_sum,
    wait_inflight_zero,
    wait_requests_metered,
)

pytestmark = pytest.mark.timeout(60)


def _events(body: bytes) -> list[dict[str, Any]]:
    out = []
    for event in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        for line in event.split(b"\n"):
            if line.startswith(b"data: "):
                out.append(json.loads(line.removeprefix(b"data: ")))
    return out


@pytest.mark.parametrize(
    ("mode", "bound", "lowered"),
    [("hold-arguments", "MAX_HELD_CHARS", 1024 * 1024), ("hold-calls", "MAX_ITEMS", 256)],
)
def test_a_stream_that_would_hold_too_much_ends_with_response_failed(
    make_gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch, mode: str, bound: str, lowered: int
) -> None:
    # The hostile worker sends ~5 MiB of argument fragments or 512 calls; the bounds are lowered
    # below that so the test stays small (the real ones are far past any real answer).
    monkeypatch.setattr(responses_stream, bound, lowered)
    with run_hostile() as hostile, make_gateway(hostile_table(hostile.urls)) as gw:
        key = gw.new_key()
        reply = post(
            gw.url + "/v1/responses",
            {"model": MODEL, "input": "hi", "stream": True},
            key=key["key"],
            headers=hostile_headers(mode),
        )
        assert reply.status == 200, reply.body[:300]
        events = _events(reply.body)
        assert events[-1]["type"] == "response.failed", str(events[-1])[:300]
        assert not any(e["type"] == "response.completed" for e in events)
        assert hostile.count() == 1
        assert wait_requests_metered(gw, key["team"], 1)["errors"] == 1
        assert metric_sum(gw, "sluicegate_upstream_errors_total", reason="stream_too_large") == 1
        wait_inflight_zero(gw, MODEL)
