"""Gemini's stream holds a candidate's function calls until the end (its `args` is one object, not
fragments). A hostile worker must not make it hold without bound: more candidate indexes than a
request can ask for, more calls than an answer needs, or megabytes of argument fragments end the
stream with Google's error object, counted as the worker's error (each failed before the bound)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import GatewayFactory
from tests.http import post
from tests.pipeline.hostile import MODEL, HostileWorker, run_hostile
from tests.pipeline.support import (
    hostile_headers,
    hostile_table,
    metric_sum,
    wait_inflight_zero,
    wait_requests_metered,
)

pytestmark = pytest.mark.timeout(60)


def _chunks(body: bytes, sse: bool) -> list[dict[str, Any]]:
    if sse:
        return [json.loads(event.removeprefix(b"data: ")) for event in body.split(b"\r\n\r\n") if event]
    chunks = json.loads(body)  # the JSON-array stream: a whole, valid array however it ended
    assert isinstance(chunks, list)
    return chunks


@pytest.mark.parametrize("sse", [True, False], ids=["sse", "json-array"])
@pytest.mark.parametrize("mode", ["hold-candidates", "hold-calls", "hold-arguments"])
def test_a_stream_that_would_hold_too_much_ends_with_googles_error(
    make_gateway: GatewayFactory, mode: str, sse: bool
) -> None:
    with run_hostile() as hostile, make_gateway(hostile_table(hostile.urls)) as gw:
        key = gw.new_key()
        path = f"/v1beta/models/{MODEL}:streamGenerateContent" + ("?alt=sse" if sse else "")
        reply = post(
            gw.url + path,
            {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
            headers={**hostile_headers(mode), "x-goog-api-key": key["key"]},
        )
        assert reply.status == 200, reply.body[:300]
        chunks = _chunks(reply.body, sse)
        last = chunks[-1]
        assert set(last) == {"error"}, f"the stream ended without Google's error object: {str(last)[:300]}"
        assert last["error"]["code"] == 502
        assert not any("finishReason" in c for chunk in chunks for c in chunk.get("candidates", ()))
        assert len(reply.body) < 1024 * 1024, "what the worker sent was held and written out"
        _counted(gw, key["team"], hostile)


def _counted(gw: Any, team: str, hostile: HostileWorker) -> None:
    assert hostile.count() == 1  # one attempt: a stream that began is not retried
    totals = wait_requests_metered(gw, team, 1)
    assert totals["errors"] == 1
    errors = metric_sum(gw, "sluicegate_upstream_errors_total", reason="stream_too_large")
    assert errors == 1
    wait_inflight_zero(gw, MODEL)
