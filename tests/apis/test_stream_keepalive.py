"""A Messages stream that waits on its worker gets Anthropic's `ping` events, so a proxy or client
with a read timeout does not give up on a long queue or a slow first token; OpenAI streams, which
have no such event, get nothing added. The worker holds its first token until the test has seen
what it waits for: nothing here depends on how fast the machine is."""

from __future__ import annotations

import asyncio
import http.client
import threading
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from tests.adversarial.scripted import (
    DONE,
    LAST_CHUNK,
    MODEL,
    SSE_HEAD,
    ScriptedWorker,
    content_chunk,
    event,
    http_chunk,
    run_scripted,
    table,
    usage_chunk,
)
from tests.conftest import GatewayFactory

WAIT_S = 30.0


def _stream(
    url: str, key: str, path: str, body: dict[str, Any], until: bytes, seen: threading.Event | None = None
) -> tuple[list[bytes], bytes]:
    """The lines read until one starting with `until` (then `seen` is set), then the rest."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=WAIT_S)
    try:
        conn.request("POST", path, body=orjson.dumps(body), headers={"x-api-key": key})
        response = conn.getresponse()
        assert response.status == 200
        lines: list[bytes] = []
        while not lines or not lines[-1].startswith(until):
            line = response.readline()
            assert line, b"".join(lines)
            lines.append(line)
        if seen is not None:
            seen.set()
        return lines, response.read()
    finally:
        conn.close()


def _held_worker(released: threading.Event) -> Any:
    async def script(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
        writer.write(SSE_HEAD)
        await writer.drain()
        await asyncio.get_running_loop().run_in_executor(None, released.wait, WAIT_S)
        body = event(content_chunk("hi")) + event(usage_chunk(3, 1)) + DONE
        writer.write(http_chunk(body) + LAST_CHUNK)
        await writer.drain()

    return script


def test_a_messages_stream_waiting_for_its_first_token_gets_pings(make_gateway: GatewayFactory) -> None:
    released = threading.Event()
    with (
        run_scripted(_held_worker(released)) as worker,
        make_gateway(table(worker.url), stream_ping_interval_s=0.05) as gw,
    ):
        key = gw.new_key()["key"]
        body = {
            "model": MODEL,
            "max_tokens": 8,
            "stream": True,
            "messages": [{"role": "user", "content": "x"}],
        }
        result: list[tuple[list[bytes], bytes]] = []
        pinged = threading.Event()
        reader = threading.Thread(
            target=lambda: result.append(_stream(gw.url, key, "/v1/messages", body, b"event: ping", pinged))
        )
        reader.start()
        try:
            assert pinged.wait(WAIT_S), "no ping while the worker held its first token"
        finally:
            released.set()  # only now may the first token come
            reader.join(WAIT_S)
        ((lines, rest),) = result
        assert lines[-1] == b"event: ping\n"
        assert not any(b"message_start" in line for line in lines)  # a ping came while it waited
        assert b'data: {"type": "ping"}' in rest
        assert b"event: message_start" in rest
        assert rest.rstrip().endswith(b'data: {"type":"message_stop"}')


def test_an_openai_stream_gets_no_keepalive_events(make_gateway: GatewayFactory) -> None:
    released = threading.Event()
    with (
        run_scripted(_held_worker(released)) as worker,
        make_gateway(table(worker.url), stream_ping_interval_s=0.05) as gw,
    ):
        key = gw.new_key()["key"]
        body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "x"}]}
        released.set()
        lines, rest = _stream(gw.url, key, "/v1/chat/completions", body, b"data: [DONE]")
        raw = b"".join(lines) + rest
        assert b"ping" not in raw
        assert raw.count(b"data: ") == 2  # the token and [DONE]


pytestmark = pytest.mark.timeout(60)
