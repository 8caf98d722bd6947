"""A worker stream cannot hold a client, a gateway or an endpoint slot past its bounds: an event
larger than `max_event_bytes` (pending or complete), a worker that keeps the connection alive with
comments, empty deltas or a byte drip but no output, and a stream past the model's `stream_total`.

Each worker is scripted byte by byte (tests/adversarial/scripted.py) and paces itself; what is
asserted is what the client and the worker saw (an error event, [DONE], a dropped connection),
never how long it took: DEADLINE_S is only a failure bound."""

from __future__ import annotations

import asyncio
import http.client
import itertools
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.errors import ConfigError
from gateway.model_file import parse_model_table
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
from tests.pipeline.support import (
    CHAT,
    DEADLINE_S,
    metric_sum,
    wait_inflight_zero,
    wait_requests_metered,
)

HELLO = [{"role": "user", "content": "hi"}]
STREAM = {"model": MODEL, "messages": HELLO, "stream": True}
MiB = 1024 * 1024


def stream_request(url: str, key: str) -> tuple[int, bytes, str | None]:
    """Status, the raw SSE body, and how the stream broke (None: it ended cleanly)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=DEADLINE_S)
    try:
        conn.request(
            "POST",
            CHAT,
            body=json.dumps(STREAM).encode(),
            headers={"content-type": "application/json", "authorization": f"Bearer {key}"},
        )
        response = conn.getresponse()
        parts: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S  # a failure bound: a worker may keep bytes coming
        try:
            while part := response.read1(65536):
                parts.append(part)
                if time.monotonic() > deadline:
                    return response.status, b"".join(parts), f"no end of stream within {DEADLINE_S}s"
        except http.client.IncompleteRead:
            return response.status, b"".join(parts), "the connection was cut mid-body"
        except TimeoutError:
            return response.status, b"".join(parts), f"no end of stream within {DEADLINE_S}s"
        return response.status, b"".join(parts), None
    finally:
        conn.close()


def data_of(raw: bytes) -> list[bytes]:
    return [block[6:] for block in raw.split(b"\n\n") if block.startswith(b"data: ")]


def ended_with_error(raw: bytes, code: str) -> dict[str, Any]:
    """Checks the stream ended with one gateway error event and [DONE]; returns its error."""
    data = data_of(raw)
    assert data[-1:] == [b"[DONE]"], f"the stream did not end with [DONE]: {data[-2:]!r}"
    assert len(data) >= 2, f"no error event before [DONE]: {data!r}"
    assert data[-2].startswith(b'{"error"'), f"no error event before [DONE]: {data[-2:]!r}"
    error: dict[str, Any] = json.loads(data[-2])["error"]
    assert error["code"] == code, error
    return error


async def write_until_closed(
    worker: ScriptedWorker,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    pieces: Iterator[bytes],
) -> None:
    """Writes piece after piece, 50 ms apart, until the gateway drops the connection."""
    for piece in pieces:
        if reader.at_eof():
            break
        writer.write(http_chunk(piece))
        await writer.drain()  # raises once the gateway has reset the connection
        await asyncio.sleep(0.05)
    worker.gateway_closed.set()


# --- an event over max_event_bytes ----------------------------------------------------------------


def test_a_line_over_the_event_limit_ends_the_stream_without_waiting_for_its_end(
    make_gateway: GatewayFactory,
) -> None:
    """A worker starts a `data:` line that never ends. Half a MiB in, another client is served
    normally; at 2 MiB (over the 1 MiB default) the client gets an error event and [DONE], and the
    worker's connection is dropped though the worker is still waiting to send the rest."""
    other_served = threading.Event()

    async def script(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
        if len(worker.received()) > 1:  # the other client's request
            body = event(content_chunk("fine")) + event(usage_chunk(3, 1)) + DONE
            writer.write(SSE_HEAD + http_chunk(body) + LAST_CHUNK)
            await writer.drain()
            return
        writer.write(SSE_HEAD + http_chunk(event(content_chunk("hi")) + b'data: {"pad":"'))
        piece = http_chunk(b"x" * 65536)
        for _ in range(8):
            writer.write(piece)
            await writer.drain()
        worker.head_sent.set()
        await asyncio.get_running_loop().run_in_executor(None, other_served.wait, DEADLINE_S)
        for _ in range(24):
            writer.write(piece)
            await writer.drain()
        await worker.hold_until_closed(reader)

    with (
        run_scripted(script) as worker,
        make_gateway(table(worker.url, idle=3600, first_token=3600)) as gw,
    ):
        key, other = gw.new_key(), gw.new_key()
        result: list[tuple[int, bytes, str | None]] = []
        big = threading.Thread(target=lambda: result.append(stream_request(gw.url, key["key"])))
        big.start()
        try:
            assert worker.head_sent.wait(DEADLINE_S), "the worker never got to write its long line"
            status, raw, broken = stream_request(gw.url, other["key"])
            assert (status, broken) == (200, None), (status, broken, raw[-300:])
            assert data_of(raw)[-1] == b"[DONE]", raw[-300:]
            assert b'"fine"' in raw, raw[-300:]
        finally:
            other_served.set()
            big.join(DEADLINE_S + 5)
        status, raw, broken = result[0]
        assert broken is None, (
            f"a worker's 2 MiB unfinished event did not end the stream ({broken}): the gateway kept "
            "buffering it past max_event_bytes (1 MiB) and waited for the rest"
        )
        assert status == 200
        ended_with_error(raw, "upstream_error")
        assert b"xxxx" not in raw, "part of the oversized event reached the client"
        assert b'"hi"' in raw, "the event before the oversized one was lost"
        assert worker.gateway_closed.wait(DEADLINE_S), "the worker's connection was kept open"
        wait_requests_metered(gw, key["team"], 1)
        wait_inflight_zero(gw)
        assert metric_sum(gw, "sluicegate_upstream_errors_total", reason="event_too_large") == 1


def test_a_complete_event_over_the_configured_limit_is_not_relayed(make_gateway: GatewayFactory) -> None:
    async def script(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
        body = (
            event(content_chunk("hi"))
            + event(content_chunk("z" * 256 * 1024))
            + event(usage_chunk(3, 2))
            + DONE
        )
        writer.write(SSE_HEAD + http_chunk(body) + LAST_CHUNK)
        await writer.drain()
        await worker.hold_until_closed(reader)

    with (
        run_scripted(script) as worker,
        make_gateway(table(worker.url), max_event_bytes=64 * 1024) as gw,
    ):
        key = gw.new_key()
        status, raw, broken = stream_request(gw.url, key["key"])
        assert (status, broken) == (200, None), (status, broken)
        assert b"zzzz" not in raw, (
            "a 256 KiB worker event arriving whole was relayed past SLUICEGATE_MAX_EVENT_BYTES (64 KiB)"
        )
        ended_with_error(raw, "upstream_error")
        assert worker.gateway_closed.wait(DEADLINE_S)
        wait_inflight_zero(gw)


# --- keep-alives that are not output ---------------------------------------------------------------

ROLE_ONLY = event({**content_chunk(""), "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
EMPTY_DELTA = event({**content_chunk(""), "choices": [{"index": 0, "delta": {}, "finish_reason": None}]})
FILLERS = ("comments", "role-only deltas", "empty deltas", "a byte drip")


def filler_bytes(filler: str) -> Iterator[bytes]:
    if filler == "comments":
        return itertools.repeat(b": keepalive\n\n")
    if filler == "role-only deltas":
        return itertools.repeat(ROLE_ONLY)
    if filler == "empty deltas":
        return itertools.repeat(EMPTY_DELTA)
    # One byte at a time: a comment completes every third byte.
    return (bytes([b]) for b in itertools.cycle(b":\n\n"))


@pytest.mark.parametrize("filler", FILLERS)
def test_keep_alives_without_output_do_not_hold_the_stream_past_idle(
    make_gateway: GatewayFactory, filler: str
) -> None:
    async def script(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
        writer.write(SSE_HEAD + http_chunk(event(content_chunk("hi"))))
        await writer.drain()
        await write_until_closed(worker, reader, writer, filler_bytes(filler))

    with run_scripted(script) as worker, make_gateway(table(worker.url, idle=1, first_token=20)) as gw:
        key = gw.new_key()
        status, raw, broken = stream_request(gw.url, key["key"])
        assert broken is None, (
            f"a worker sending {filler} every 50 ms but no output held the stream past idle (1 s): "
            f"{broken}; they reset the idle timer"
        )
        assert status == 200
        error = ended_with_error(raw, "upstream_timeout")
        assert "next token" in error["message"], error
        if filler == "comments":
            assert b": keepalive\n\n" in raw, "the worker's comments were not passed on"
        assert worker.gateway_closed.wait(DEADLINE_S)
        wait_requests_metered(gw, key["team"], 1)
        wait_inflight_zero(gw)


def test_comments_do_not_stand_in_for_the_first_token(make_gateway: GatewayFactory) -> None:
    async def script(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
        writer.write(SSE_HEAD)
        await writer.drain()
        await write_until_closed(worker, reader, writer, itertools.repeat(b": keepalive\n\n"))

    with run_scripted(script) as worker, make_gateway(table(worker.url, idle=20, first_token=1)) as gw:
        key = gw.new_key()
        status, raw, broken = stream_request(gw.url, key["key"])
        assert status == 200
        assert broken is None, (
            f"a worker sending only comments held the stream past first_token (1 s): {broken}; the "
            "first comment replaced the first-token deadline with the idle timeout"
        )
        error = ended_with_error(raw, "upstream_timeout")
        assert "first token" in error["message"], error
        assert worker.gateway_closed.wait(DEADLINE_S)
        wait_inflight_zero(gw)


# --- stream_total ----------------------------------------------------------------------------------


def test_a_stream_past_stream_total_ends_with_a_timeout_error(make_gateway: GatewayFactory) -> None:
    async def script(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
        writer.write(SSE_HEAD)
        await writer.drain()
        usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
        await write_until_closed(
            worker, reader, writer, itertools.repeat(event(content_chunk("tok ", usage)))
        )

    with (
        run_scripted(script) as worker,
        make_gateway(table(worker.url, idle=20, first_token=20, stream_total=1)) as gw,
    ):
        key = gw.new_key()
        status, raw, broken = stream_request(gw.url, key["key"])
        assert (status, broken) == (200, None), (status, broken)
        assert b'"tok "' in raw
        ended_with_error(raw, "upstream_timeout")
        assert worker.gateway_closed.wait(DEADLINE_S), "the worker was left generating"
        totals = wait_requests_metered(gw, key["team"], 1)
        assert totals["completion_tokens"] >= 1, "the tokens relayed before the cut were not billed"
        wait_inflight_zero(gw)


def test_stream_total_is_a_model_timeout_checked_like_the_others() -> None:
    def parsed(timeouts: dict[str, Any]) -> Any:
        document = {"models": [{"name": "m", "endpoints": [{"url": "http://w:8000"}], "timeouts": timeouts}]}
        return parse_model_table(document).models[0].timeouts

    assert parsed({"stream_total": 90}).stream_total == 90.0
    assert parsed({}).stream_total >= parsed({}).total, "the default cuts streams shorter than answers"
    for bad in (0, -1, "long", True):
        with pytest.raises(ConfigError, match=r"timeouts\.stream_total"):
            parsed({"stream_total": bad})
