"""A client that stops reading a stream must not keep its worker slot: once a write to it has
waited longer than the model's `idle` timeout, the gateway cuts it, drops the worker connection and
settles the request as one whose client left.

The first test goes through a real gateway and a real client socket that never reads (its
receive buffer shrunk so it fills at once); the second drives the real StreamRelay with a stand-in
client whose `send` never returns, to see exactly what the relay tries to write and that it
cuts the connection through the server's abort extension. Nothing is timed: DEADLINE_S is only a
failure bound."""

from __future__ import annotations

import asyncio
import json
import math
import socket
from typing import Any, cast

from gateway.apis.openai.dialect import CHAT
from gateway.model_table import HealthConfig, ModelConfig, ModelTable, RoutingConfig, Timeouts
from gateway.proxy.relay import StreamRelay
from gateway.proxy.settlement import Outcome
from gateway.proxy.upstream import UpstreamResponse
from gateway.routing.endpoint import Endpoint
from gateway.routing.pool import Pool
from gateway.worker.client import WorkerClient
from tests.adversarial.scripted import (
    MODEL,
    SSE_HEAD,
    ScriptedWorker,
    content_chunk,
    event,
    http_chunk,
    run_scripted,
)
from tests.conftest import GatewayFactory
from tests.http import post
from tests.pipeline.support import DEADLINE_S, wait_inflight_zero, wait_requests_metered

HELLO = [{"role": "user", "content": "hi"}]
BIG_TOKEN = "x" * 65536


async def _answer(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
    """The first request streams large chunks until the gateway drops it; later ones get a
    whole answer."""
    if len(worker.received()) > 1:
        body = json.dumps(
            {
                "id": "chatcmpl-review",
                "object": "chat.completion",
                "created": 1700000000,
                "model": MODEL,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
            }
        ).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
            + body
        )
        await writer.drain()
        return
    writer.write(SSE_HEAD)
    usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    while True:
        writer.write(http_chunk(event(content_chunk(BIG_TOKEN, usage))))
        await writer.drain()  # raises once the gateway has dropped the connection


def one_slot_table(url: str, idle: float = 1) -> ModelTable:
    return ModelTable(
        (
            ModelConfig(
                name=MODEL,
                endpoints=(url,),
                timeouts=Timeouts(connect=2, first_token=20, idle=idle, total=max(idle, 20)),
                routing=RoutingConfig(max_inflight_per_endpoint=1),
                health=HealthConfig(failures_to_eject=1000),
            ),
        )
    )


def never_reading(gateway_url: str, key: str, body: bytes, *, times: int = 1) -> socket.socket:
    """A connection that sends `times` chat requests with `body` and never reads."""
    host, port = gateway_url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills at once: never read
    sock.settimeout(DEADLINE_S)
    sock.connect((host, int(port)))
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {key}\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    sock.sendall((head.encode() + body) * times)
    return sock


def _drained_to_its_end(sock: socket.socket) -> bool:
    """Reads what the gateway had written; True once the connection ends (closed or reset)."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


def test_a_client_that_stops_reading_gives_its_worker_slot_back(make_gateway: GatewayFactory) -> None:
    with run_scripted(_answer) as worker, make_gateway(one_slot_table(worker.url)) as gw:
        stalled_key, other_key = gw.new_key(), gw.new_key()
        body = json.dumps({"model": MODEL, "messages": HELLO, "stream": True}).encode()
        sock = never_reading(gw.url, stalled_key["key"], body)
        try:
            assert worker.gateway_closed.wait(DEADLINE_S), (
                "a client that stopped reading kept its stream's worker connection open: the relay "
                "waits on the client's full socket buffer with no bound, holding the endpoint's only slot"
            )
            assert _drained_to_its_end(sock), "the stalled client's connection was left open"
            totals = wait_requests_metered(gw, stalled_key["team"], 1)
            assert totals["disconnects"] == 1, f"the stalled client's request was settled as {totals}"
            wait_inflight_zero(gw)
            reply = post(
                gw.url + "/v1/chat/completions",
                {"model": MODEL, "messages": HELLO},
                key=other_key["key"],
                timeout=DEADLINE_S,
            )
            assert reply.status == 200, f"another team was refused after the stall: {reply.body[:300]!r}"
            assert json.loads(reply.body)["choices"][0]["message"]["content"] == "ok"
        finally:
            sock.close()


# --- the relay's side, exactly -------------------------------------------------------------------


class _Pool:
    def report(self, endpoint: Any, verdict: Any, *, trial: bool) -> None:
        pass

    def release(self, endpoint: Any, held_s: float | None = None) -> None:
        pass


class StalledClient:
    """uvicorn's `send` for a client that stopped reading after the first body: every later send
    waits for a drain that never comes. `abort` is the server's abort extension."""

    def __init__(self) -> None:
        self.attempted: list[dict[str, Any]] = []
        self.aborted = 0
        self._gone = asyncio.Event()
        self._never = asyncio.Event()

    async def send(self, message: Any) -> None:
        self.attempted.append(message)
        bodies = [m for m in self.attempted if m["type"] == "http.response.body"]
        if len(bodies) > 1:
            await self._never.wait()

    async def receive(self) -> Any:
        await self._gone.wait()
        return {"type": "http.disconnect"}

    def abort(self) -> None:
        self.aborted += 1
        self._gone.set()  # what uvicorn's connection_lost does


async def stall(
    url: str, client: StalledClient | None = None, *, idle_s: float = 0.5, write_stall_s: float = math.inf
) -> tuple[Outcome, StalledClient]:
    """Relays the worker at `url` to `client` (by default one that stalls after the first body)."""
    call = CHAT.parse(json.dumps({"model": MODEL, "messages": HELLO, "stream": True}).encode())
    loop = asyncio.get_running_loop()
    client_ = WorkerClient()
    try:
        response = await client_.post(url, "/v1/chat/completions", b"{}", {}, connect_s=DEADLINE_S)
        upstream = UpstreamResponse(cast(Pool, _Pool()), cast(Endpoint, object()), response, trial=False)
        outcome = Outcome(reached_worker=True)
        client = client or StalledClient()
        relay = StreamRelay(
            upstream,
            CHAT.stream(call, MODEL),
            outcome,
            headers=[],
            first_token_deadline=loop.time() + DEADLINE_S,
            idle_timeout_s=idle_s,
            write_stall_s=write_stall_s,
            abort_client=client.abort,
        )
        await asyncio.wait_for(relay.run(client.receive, client.send), DEADLINE_S)
        return outcome, client
    finally:
        await client_.aclose()


def test_the_relay_cuts_a_stalled_client_without_writing_to_it_again() -> None:
    with run_scripted(_answer) as worker:
        outcome, client = asyncio.run(stall(worker.url))
        assert worker.gateway_closed.wait(DEADLINE_S), "the worker connection was not dropped"
    assert client.aborted == 1, "the client's connection was not cut through the abort extension"
    bodies = [m.get("body", b"") for m in client.attempted if m["type"] == "http.response.body"]
    assert len(bodies) == 2, f"after a write that never drained the relay wrote again: {bodies[2:]!r}"
    assert all(b'"error"' not in b for b in bodies), "the relay tried to send an error to a stalled client"
    assert outcome.disconnected, "a stalled client is settled as one that left"
    assert outcome.error_reason is None, "a client that stopped reading is not the worker's error"


async def _whole_answers(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
    """The first request gets a whole answer far larger than the socket buffers between the
    gateway and a client that never reads; later ones a short one."""
    content = "x" * (8 * 1024 * 1024) if len(worker.received()) == 1 else "ok"
    body = json.dumps(
        {
            "id": "chatcmpl-review",
            "object": "chat.completion",
            "created": 1700000000,
            "model": MODEL,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        }
    ).encode()
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
        + body
    )
    await writer.drain()


def test_a_client_that_stops_reading_whole_answers_is_cut_and_settled(make_gateway: GatewayFactory) -> None:
    """Two pipelined requests from a client that reads nothing: the first answer fills every
    buffer on the way, so the second answer's write waits on it. That wait is bounded by `idle`:
    the client is cut and the second request settled as a departure; the first was handed over."""
    with run_scripted(_whole_answers) as worker, make_gateway(one_slot_table(worker.url)) as gw:
        stalled_key, other_key = gw.new_key(), gw.new_key()
        body = json.dumps({"model": MODEL, "messages": HELLO}).encode()
        sock = never_reading(gw.url, stalled_key["key"], body, times=2)
        try:
            totals = wait_requests_metered(gw, stalled_key["team"], 2)
            assert totals["disconnects"] == 1, f"the stalled client's requests were settled as {totals}"
            assert _drained_to_its_end(sock), "the stalled client's connection was left open"
            wait_inflight_zero(gw)
            reply = post(
                gw.url + "/v1/chat/completions",
                {"model": MODEL, "messages": HELLO},
                key=other_key["key"],
                timeout=DEADLINE_S,
            )
            assert reply.status == 200, f"another team was refused after the stall: {reply.body[:300]!r}"
        finally:
            sock.close()
