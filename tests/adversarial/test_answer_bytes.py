"""Whole answers held at once are bounded across every request of a replica (gateway/proxy/answer_bytes.py):
an answer that would take the replica past SLUICEGATE_MAX_BUFFERED_ANSWER_BYTES is cut and its
client gets 503 `server_busy`; the bytes come back once an answer is delivered.

A scripted worker on a real socket: the first answer's body is held part-way (so its bytes stay
held), the others are sent whole. When the gateway holds the first answer's bytes is read off its
own gauge (sluicegate_buffered_answer_bytes), never off a clock."""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.adversarial.scripted import MODEL, ScriptedWorker, run_scripted, table
from tests.conftest import GatewayFactory
from tests.http import Reply, post
from tests.pipeline.support import metric_sum
from tests.waiting import wait_until

MIB = 1024 * 1024
LIMIT = 4 * MIB
HELD = 3 * MIB  # what the held answer has sent when the second request comes
BIG = 2 * MIB  # a second answer of this size passes the limit while the first is held


def _answer(size: int) -> bytes:
    """A chat answer of `size` bytes (its text pads it)."""
    shell = {
        "id": "chatcmpl-big",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    pad = size - len(json.dumps(shell))
    shell["choices"][0]["message"]["content"] = "x" * pad  # type: ignore[index]
    body = json.dumps(shell).encode()
    assert len(body) == size
    return body


def test_whole_answers_past_the_replicas_bound_are_a_503_and_the_bytes_come_back(
    make_gateway: GatewayFactory,
) -> None:
    release = threading.Event()
    held_answer = _answer(HELD + MIB // 2)

    async def script(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
        hold = b"hold" in request.body
        body = held_answer if hold else _answer(BIG)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n" % len(body)
        )
        if hold:
            writer.write(body[:HELD])
            await writer.drain()
            await asyncio.get_running_loop().run_in_executor(None, release.wait, 60)
            body = body[HELD:]
        writer.write(body)
        await writer.drain()

    with (
        run_scripted(script) as worker,
        make_gateway(table(worker.url), max_buffered_answer_bytes=LIMIT) as gw,
        ThreadPoolExecutor(1) as pool,
    ):
        key = gw.new_key()["key"]

        def ask(text: str) -> Reply:
            body = {"model": MODEL, "messages": [{"role": "user", "content": text}]}
            return post(f"{gw.url}/v1/chat/completions", body, key=key, timeout=60)

        try:
            first = pool.submit(ask, "hold")
            wait_until(
                lambda: metric_sum(gw, "sluicegate_buffered_answer_bytes") == HELD, 30, "the held answer read"
            )
            refused = ask("big")
            assert refused.status == 503, refused.body[:300]
            assert refused.json()["error"]["code"] == "server_busy"
            assert metric_sum(gw, "sluicegate_buffered_answer_bytes") == HELD, (
                "the refused answer gave its bytes back"
            )
        finally:
            release.set()
        whole = first.result(60)
        assert whole.status == 200, whole.body[:300]
        assert len(whole.json()["choices"][0]["message"]["content"]) > HELD
        wait_until(
            lambda: metric_sum(gw, "sluicegate_buffered_answer_bytes") == 0, 30, "the bytes given back"
        )
        assert ask("big").status == 200, "an answer that fits is served once the first one is delivered"
