"""Continuous usage on a client that leaves mid-stream: the request must be metered at the
worker's cumulative usage as of the last chunk that actually went out to the client.

When the client is slow, uvicorn's `send` waits for the socket to drain; when the client then
hangs up, uvicorn wakes that `send`, and it returns without writing anything (uvicorn 0.54,
httptools_impl.py: `send` ... `if self.disconnected: return`; `connection_lost` sets the
receive event and then resumes writing). The relay records the usage of a batch as "relayed" as
soon as `send` returns, so the batch that was never written is billed.

This drives the real StreamRelay over a real worker response (the gateway's WorkerClient) from a
loopback worker; the client side is a stand-in with exactly uvicorn's `send`/`receive` semantics
and wake-up order, so which batch was written is known exactly (no kernel buffer sizes involved)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, cast

from gateway.apis.openai.dialect import CHAT
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
from tests.pipeline.support import DEADLINE_S

FIRST = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
SECOND = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}


class _Pool:
    def report(self, endpoint: Any, ok: bool | None, *, trial: bool) -> None:
        pass

    def release(self, endpoint: Any, held_s: float | None = None) -> None:
        pass


class UvicornLikeClient:
    """uvicorn's HTTP cycle, reduced to what the relay touches: after `pause_after` bodies the
    transport is full and `send` waits to drain; `hang_up` is `connection_lost`."""

    def __init__(self, pause_after: int, first_written: threading.Event) -> None:
        self.pause_after = pause_after
        self.first_written = first_written
        self.bodies: list[bytes] = []
        self.disconnected = False
        self.write_paused = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._message = asyncio.Event()
        self.waiting_to_drain = asyncio.Event()

    async def send(self, message: Any) -> None:
        if self.write_paused and not self.disconnected:
            self.waiting_to_drain.set()
            await self._writable.wait()
        if self.disconnected:
            return  # uvicorn: nothing is written, nothing is raised
        if message["type"] == "http.response.body" and message.get("body"):
            self.bodies.append(message["body"])
            self.first_written.set()
            if len(self.bodies) >= self.pause_after:
                self.write_paused = True  # the client stopped reading: the transport is full
                self._writable.clear()

    async def receive(self) -> Any:
        await self._message.wait()
        return {"type": "http.disconnect"}

    def hang_up(self) -> None:
        self.disconnected = True
        self._message.set()  # connection_lost: cycle.message_event.set() ...
        self.write_paused = False  # ... then flow.resume_writing()
        self._writable.set()


def _script(first_written: threading.Event) -> Any:
    async def script(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
        writer.write(SSE_HEAD + http_chunk(event(content_chunk("one ", FIRST))))
        await writer.drain()
        # The second chunk only once the first has been written to the client: a batch of its own.
        await asyncio.get_running_loop().run_in_executor(None, first_written.wait, DEADLINE_S)
        writer.write(http_chunk(event(content_chunk("two ", SECOND))))
        await writer.drain()
        await worker.hold_until_closed(reader)

    return script


def _usages(bodies: list[bytes]) -> list[int]:
    found = []
    for body in bodies:
        for block in body.split(b"\n\n"):
            if block.startswith(b"data: {"):
                usage = json.loads(block[6:]).get("usage")
                if usage:
                    found.append(usage["completion_tokens"])
    return found


async def _scenario(url: str, first_written: threading.Event) -> tuple[Outcome, list[bytes]]:
    call = CHAT.parse(
        json.dumps(
            {
                "model": MODEL,
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            }
        ).encode()
    )
    loop = asyncio.get_running_loop()
    client_ = WorkerClient()
    try:
        response = await client_.post(url, "/v1/chat/completions", b"{}", {}, connect_s=DEADLINE_S)
        upstream = UpstreamResponse(cast(Pool, _Pool()), cast(Endpoint, object()), response, trial=False)
        outcome = Outcome(reached_worker=True)
        relay = StreamRelay(
            upstream,
            CHAT.stream(call, MODEL),
            outcome,
            headers=[],
            first_token_deadline=loop.time() + DEADLINE_S,
            idle_timeout_s=DEADLINE_S,
        )
        client = UvicornLikeClient(pause_after=1, first_written=first_written)
        running = asyncio.ensure_future(relay.run(client.receive, client.send))
        await asyncio.wait_for(client.waiting_to_drain.wait(), DEADLINE_S)
        client.hang_up()
        await asyncio.wait_for(running, DEADLINE_S)
        return outcome, client.bodies
    finally:
        await client_.aclose()


def test_a_batch_never_written_is_not_billed_to_a_client_that_left() -> None:
    first_written = threading.Event()
    with run_scripted(_script(first_written)) as worker:
        outcome, bodies = asyncio.run(_scenario(worker.url, first_written))
    written = _usages(bodies)
    assert written == [1], f"the client was written {bodies!r}"
    assert outcome.disconnected
    relayed = outcome.relayed_usage
    assert relayed is not None
    assert relayed.completion_tokens == 1, (
        f"the client received chunks up to completion_tokens=1, but the request is metered at "
        f"{relayed.completion_tokens}: the batch whose send uvicorn dropped (client gone while the "
        "transport drained) was recorded as relayed"
    )
