"""A client that stops reading is cut after the short write-stall bound, not the model's `idle`, and
its request is billed the worker's own last cumulative count, not the one that reached the client:
the engine generated those tokens whether or not the client took them.

The model's `idle` here (60 s) is longer than every wait in these tests (DEADLINE_S), so only the
write-stall bound can cut the client in time. Nothing is timed: DEADLINE_S is only a failure bound."""

from __future__ import annotations

import asyncio
import json
import threading
from types import SimpleNamespace
from typing import Any, cast

from gateway.proxy.settlement import Outcome, Settlement
from tests.adversarial.scripted import (
    MODEL,
    SSE_HEAD,
    ScriptedWorker,
    content_chunk,
    event,
    http_chunk,
    run_scripted,
)
from tests.adversarial.test_client_stall import StalledClient, never_reading, one_slot_table, stall
from tests.conftest import GatewayFactory
from tests.pipeline.support import DEADLINE_S, wait_inflight_zero, wait_requests_metered

HELLO = [{"role": "user", "content": "hi"}]
EVENTS = 40  # the worker's cumulative completion count after its last event
LONG_IDLE_S = 60.0


def _usage(completion: int) -> dict[str, int]:
    return {"prompt_tokens": 3, "completion_tokens": completion, "total_tokens": 3 + completion}


async def _burst_then_hold(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
    """Every event at once, each with the cumulative count so far, then nothing until closed."""
    burst = b"".join(http_chunk(event(content_chunk("tok ", _usage(i)))) for i in range(1, EVENTS + 1))
    writer.write(SSE_HEAD + burst)
    await writer.drain()
    await worker.hold_until_closed(reader)


class _StalledFromTheStart(StalledClient):
    """Takes the response head, then no body at all."""

    async def send(self, message: Any) -> None:
        self.attempted.append(message)
        if message["type"] == "http.response.body":
            await asyncio.Event().wait()


class _Billed:
    """What Settlement.tokens reads."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self.estimated_prompt = 0
        self.ctx = SimpleNamespace(unbilled=False)  # a request of its own, not a batch line's rerun


def test_a_stalled_client_is_billed_the_workers_last_cumulative_count() -> None:
    with run_scripted(_burst_then_hold) as worker:
        outcome, client = asyncio.run(
            stall(worker.url, _StalledFromTheStart(), idle_s=LONG_IDLE_S, write_stall_s=0.2)
        )
        assert worker.gateway_closed.wait(DEADLINE_S), "the worker connection was not closed"
    assert client.aborted == 1, "the stalled client's connection was not cut"
    assert outcome.disconnected, "a stalled client is settled as one that left"
    assert outcome.error_reason is None, "a client that stopped reading is not the worker's error"
    prompt, completion = Settlement.tokens(cast(Settlement, _Billed(outcome)))
    assert (prompt, completion) == (3, EVENTS), (
        f"billed {prompt}+{completion} tokens; the worker had reported 3+{EVENTS} before the client was "
        "cut: nothing reached the client, but the engine generated them"
    )


# --- through a real gateway and a client socket that never reads -----------------------------------


BIG_TOKEN = "x" * 65536


class _Endless:
    """Streams large events, each with the cumulative count so far, until the gateway drops it."""

    def __init__(self) -> None:
        self.last_count = 0
        self._lock = threading.Lock()

    async def __call__(self, worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
        writer.write(SSE_HEAD)
        count = 0
        while True:
            count += 1
            writer.write(http_chunk(event(content_chunk(BIG_TOKEN, _usage(count)))))
            with self._lock:
                self.last_count = count
            await writer.drain()  # raises once the gateway has dropped the connection


def test_a_client_that_stops_reading_is_cut_long_before_idle(make_gateway: GatewayFactory) -> None:
    script = _Endless()
    with (
        run_scripted(script) as worker,
        make_gateway(one_slot_table(worker.url, idle=LONG_IDLE_S), client_write_stall_s=0.5) as gw,
    ):
        key = gw.new_key()
        body = json.dumps({"model": MODEL, "messages": HELLO, "stream": True}).encode()
        sock = never_reading(gw.url, key["key"], body)
        try:
            assert worker.gateway_closed.wait(DEADLINE_S), (
                "a client that stopped reading kept its worker generating: the relay waits up to the "
                f"model's idle ({LONG_IDLE_S} s) instead of the write-stall bound"
            )
            totals = wait_requests_metered(gw, key["team"], 1)
            assert totals["disconnects"] == 1, f"the stalled client's request was settled as {totals}"
            # Everything the gateway read from the worker is billed: at least the event whose write
            # stalled (the first one never reached the client), at most what the worker sent.
            assert 1 <= totals["completion_tokens"] <= script.last_count, totals
            assert totals["prompt_tokens"] == 3, totals
            wait_inflight_zero(gw)
        finally:
            sock.close()
