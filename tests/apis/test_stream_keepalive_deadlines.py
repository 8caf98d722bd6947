"""Anthropic pings keep the client's connection alive, never the worker's deadlines: a worker that
sends its head and one comment, then nothing, still times out on `first_token` (pings extending it
would hold the stream until the client's own 30 s timeout), and nothing follows the error event."""

from __future__ import annotations

from typing import Any

import pytest

from tests.adversarial.scripted import MODEL, SSE_HEAD, ScriptedWorker, run_scripted, table
from tests.conftest import GatewayFactory
from tests.http import post

pytestmark = pytest.mark.timeout(60)


async def _silent(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
    writer.write(SSE_HEAD + b"3\r\n: c\r\n")  # a head and one comment, then nothing, ever
    await writer.drain()
    await worker.hold_until_closed(reader)


def test_pings_do_not_keep_a_silent_worker_alive(make_gateway: GatewayFactory) -> None:
    with (
        run_scripted(_silent) as worker,
        make_gateway(table(worker.url, first_token=1.5, idle=1.0), stream_ping_interval_s=0.05) as gw,
    ):
        key = gw.new_key()["key"]
        r = post(
            f"{gw.url}/v1/messages",
            {"model": MODEL, "max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": "x"}]},
            key=key,
            timeout=30,
        )
        assert r.status == 200
        assert b"event: error" in r.body, r.body[-400:]
        assert b"timed out" in r.body, r.body[-400:]
        assert r.body.rstrip().endswith(b"}"), r.body[-200:]
        assert r.body.rfind(b"event: ping") < r.body.rfind(b"event: error")  # nothing after it
