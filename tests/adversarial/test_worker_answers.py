"""Worker answers that the rewritten request path does not survive: a stream cut off with no error
event, a 500 for a worker's 4xx, a stream that hangs past its first-token deadline, a worker
error event relayed in the worker's own envelope, and a whole answer whose client left but whose
worker is never told.

Each worker is scripted byte by byte (tests/adversarial/scripted.py); each test's deadline is only a
failure bound, never what is measured."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any

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
from tests.http import post
from tests.pipeline.support import CHAT, DEADLINE_S, envelope, wait_inflight_zero, wait_requests_metered

HELLO = [{"role": "user", "content": "hi"}]


def _stream_request(url: str, key: str, body: dict[str, Any]) -> tuple[int, list[bytes], str | None]:
    """Status, the SSE data payloads, and how the stream broke (None: it ended cleanly)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=DEADLINE_S)
    try:
        conn.request(
            "POST",
            CHAT,
            body=json.dumps(body).encode(),
            headers={"content-type": "application/json", "authorization": f"Bearer {key}"},
        )
        response = conn.getresponse()
        raw = b""
        broken: str | None = None
        try:
            raw = response.read()
        except http.client.IncompleteRead as exc:
            raw, broken = exc.partial, "the connection was cut mid-body (IncompleteRead)"
        except TimeoutError:
            broken = f"no end of stream within {DEADLINE_S}s"
        data = [b[6:] for b in raw.split(b"\n\n") if b.startswith(b"data: ")]
        return response.status, data, broken
    finally:
        conn.close()


# --- a chunk the relay cannot re-encode ----------------------------------------------------------

DEPTH = 300  # orjson.loads takes it (limit 1024), orjson.dumps does not (limit 254)


def _nested() -> Any:
    value: Any = 0
    for _ in range(DEPTH):
        value = [value]
    return value


async def _nested_chunk_stream(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    # Continuous usage on a content chunk (what the gateway asks every worker for): a client that
    # did not ask for it gets the chunk re-encoded without it, and the re-encoding raises.
    body = event(content_chunk("hi", usage, logprobs_extra=_nested())) + event(usage_chunk(3, 1)) + DONE
    writer.write(SSE_HEAD + http_chunk(body) + LAST_CHUNK)
    await writer.drain()


def test_a_worker_chunk_the_relay_cannot_reencode_still_ends_the_stream_properly(
    make_gateway: GatewayFactory,
) -> None:
    with run_scripted(_nested_chunk_stream) as worker, make_gateway(table(worker.url)) as gw:
        key = gw.new_key()
        status, data, broken = _stream_request(
            gw.url, key["key"], {"model": MODEL, "messages": HELLO, "stream": True}
        )
        assert status == 200
        assert broken is None, (
            "a worker chunk nested 300 deep killed the relay with an unhandled TypeError (orjson.dumps "
            f"recursion limit): {broken}; the client got no error event and no [DONE] ({data[-2:]!r})"
        )
        assert data, "the client got no events"
        assert data[-1] == b"[DONE]", (
            "a worker chunk nested 300 deep killed the relay with an unhandled TypeError (orjson.dumps "
            f"recursion limit): {broken}; the client got no error event and no [DONE] ({data[-2:]!r})"
        )
        wait_requests_metered(gw, key["team"], 1)
        wait_inflight_zero(gw)


# --- a worker refusal with a header the gateway cannot re-send -------------------------------------


async def _refusal_with_utf8_retry_after(
    worker: ScriptedWorker, request: Any, reader: Any, writer: Any
) -> None:
    body = json.dumps({"error": {"message": "slow down", "type": "RateLimitError", "code": 429}}).encode()
    writer.write(
        b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n"
        b"retry-after: \xe2\x82\xac\r\n"  # UTF-8 bytes: aiohttp decodes them as '\u20ac'
        + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
        + body
    )
    await writer.drain()


def test_a_worker_4xx_with_a_non_latin1_retry_after_is_not_a_500(make_gateway: GatewayFactory) -> None:
    with run_scripted(_refusal_with_utf8_retry_after) as worker, make_gateway(table(worker.url)) as gw:
        key = gw.new_key()
        reply = post(f"{gw.url}{CHAT}", {"model": MODEL, "messages": HELLO}, key=key["key"])
        assert reply.status != 500, (
            "a worker's 429 whose Retry-After is not latin-1 became a 500 internal_error: the forwarded "
            f"header made Starlette's Response raise UnicodeEncodeError ({reply.body[:200]!r})"
        )
        envelope(reply, reply.status)
        wait_inflight_zero(gw)


# --- the first-token deadline lifted by a byte that is not an event --------------------------------


async def _half_an_event_then_silence(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
    writer.write(SSE_HEAD + http_chunk(b'data: {"id":"chatcmpl-review","choices":'))
    await writer.drain()
    await worker.hold_until_closed(reader)


def test_half_an_event_does_not_lift_the_first_token_deadline(make_gateway: GatewayFactory) -> None:
    # first_token 1 s; idle and total far beyond the test's own failure bound.
    with run_scripted(_half_an_event_then_silence) as worker:
        gw_table = table(worker.url, first_token=1, idle=3600, total=3600)
        with make_gateway(gw_table) as gw:
            key = gw.new_key()
            status, data, broken = _stream_request(
                gw.url, key["key"], {"model": MODEL, "messages": HELLO, "stream": True}
            )
            assert broken is None, (
                "a worker that sent 40 bytes of its first event and then nothing held the stream open "
                f"past the model's 1 s first-token deadline ({broken}): any byte, even half an event, "
                "replaces first_token with the idle timeout"
            )
            assert status in (200, 504)
            assert any(b"upstream_timeout" in d for d in data), data
            assert worker.gateway_closed.wait(DEADLINE_S)


# --- a worker's own error event ---------------------------------------------------------------------


async def _vllm_error_event(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
    # vLLM's shape for an error after the stream began: an integer code, its own fields.
    error = {
        "error": {
            "object": "error",
            "message": "x" * 5000,
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    }
    body = event(content_chunk("hi")) + event(error) + DONE
    writer.write(SSE_HEAD + http_chunk(body) + LAST_CHUNK)
    await writer.drain()


def test_a_worker_error_event_reaches_the_client_in_the_gateway_envelope(
    make_gateway: GatewayFactory,
) -> None:
    with run_scripted(_vllm_error_event) as worker, make_gateway(table(worker.url)) as gw:
        key = gw.new_key()
        status, data, broken = _stream_request(
            gw.url, key["key"], {"model": MODEL, "messages": HELLO, "stream": True}
        )
        assert status == 200
        assert broken is None, broken
        errors = [json.loads(d) for d in data if d.startswith(b'{"error"')]
        assert len(errors) == 1, data
        error = errors[0]["error"]
        assert set(errors[0]) == {"error"}
        assert isinstance(error, dict)
        assert set(error) == {"message", "type", "param", "code"}, (
            "the worker's mid-stream error event was relayed as the worker wrote it "
            f"(fields {sorted(error)}), not in the gateway's envelope"
        )
        assert error["code"] is None or isinstance(error["code"], str), (
            f"the client's error event has code {error['code']!r}: the worker's integer code was relayed"
        )
        assert len(error["message"]) <= 500, (
            f"the worker's {len(error['message'])}-character message was relayed unbounded"
        )


# --- a whole answer whose client left after the worker's head --------------------------------------

DECLARED = 48 * 1024 * 1024
SENT = 40 * 1024 * 1024  # far more than any socket buffers: the gateway must be reading the body


async def _head_then_most_of_the_body(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: close\r\n\r\n" % DECLARED
    )
    writer.write(b'{"padding":"' + b"x" * (SENT - 12))
    await writer.drain()  # returns once the gateway has read most of it: it is in read_whole
    worker.head_sent.set()
    await worker.hold_until_closed(reader)


def test_a_client_leaving_during_a_whole_answer_frees_the_worker(make_gateway: GatewayFactory) -> None:
    with (
        run_scripted(_head_then_most_of_the_body) as worker,
        make_gateway(table(worker.url, total=3600, idle=3600, first_token=3600)) as gw,
    ):
        key = gw.new_key()
        host, port = gw.url.removeprefix("http://").split(":")
        body = json.dumps({"model": MODEL, "messages": HELLO}).encode()
        sock = socket.create_connection((host, int(port)), timeout=DEADLINE_S)
        try:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                + f"authorization: Bearer {key['key']}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert worker.head_sent.wait(DEADLINE_S), "the worker's body was never read"
        finally:
            sock.close()
        assert worker.gateway_closed.wait(DEADLINE_S), (
            "the client hung up while the gateway was reading a whole answer, and the worker's "
            f"connection was still open {DEADLINE_S}s later: the disconnect watcher only covers "
            "the wait for the head, so the engine keeps generating until `total` (3600 s here) and "
            "the request stays in flight"
        )
        totals = wait_requests_metered(gw, key["team"], 1)
        assert totals["disconnects"] == 1
        wait_inflight_zero(gw)
