"""Review test (drain): a streaming client that stops reading when the drain cuts."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import pytest

from gateway.dev.embedded_redis import EmbeddedRedis
from tests.adversarial.scripted import (
    MODEL,
    SSE_HEAD,
    ScriptedWorker,
    content_chunk,
    event,
    http_chunk,
    run_scripted,
)
from tests.faults.conftest import StartGateway
from tests.faults.test_drain import _rows

pytestmark = pytest.mark.timeout(120)


def _flooding_worker(flooded: threading.Event) -> Any:
    async def script(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
        writer.write(SSE_HEAD)
        usage = {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}
        one = event(content_chunk("x" * 8000, usage=usage))
        for _ in range(4000):  # ~32 MB: far more than the client's and the gateway's buffers
            writer.write(http_chunk(one))
            await writer.drain()
        flooded.set()
        await worker.hold_until_closed(reader)

    return script


def test_a_stalled_stream_cut_by_the_drain_is_still_metered(
    redis_server: EmbeddedRedis, start_gateway: StartGateway
) -> None:
    team = f"review-stall-{time.monotonic_ns()}"
    flooded = threading.Event()
    with run_scripted(_flooding_worker(flooded)) as worker:
        models = (
            f"models:\n  - name: {MODEL}\n    endpoints: [{{url: '{worker.url}'}}]\n"
            "    timeouts: {first_token: 60, idle: 60, stream_total: 600}\n"
        )
        gw = start_gateway(redis_server.url, models=models, SLUICEGATE_DRAIN_TIMEOUT="0.5")
        gw.admin.call("POST", "/admin/v1/teams", {"name": team})
        key = gw.new_key(team)["key"]
        parts = urlsplit(gw.url)
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect((parts.hostname, parts.port))
        body = json.dumps({"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "a"}]})
        client.sendall(
            (
                f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n{body}"
            ).encode()
        )
        # Whether or not the gateway is already blocked writing to this client when the cut comes,
        # the outcome must be the same (exit 0, bounded, metered once); the wait only makes the
        # blocked case the likely one.
        time.sleep(3)
        started = time.monotonic()
        gw.process.send_signal(signal.SIGTERM)
        code = gw.process.wait(timeout=60)
        took = time.monotonic() - started
        log = gw.log()
        client.close()
        assert code == 0, log
        assert "Traceback" not in log, log
        assert took < 30, took  # bounded: the drain, then at most the cut grace, not the model's idle (60 s)
    rows = _rows(redis_server, start_gateway, team)
    assert [row["requests"] for row in rows] == [1], (rows, log)
