"""A client that leaves mid-stream: the worker must see its connection closed, and what was
relayed must be metered. Each generation is far longer than any wait here, so a worker record
that says "disconnected" (not "completed") is the proof; the waits only bound a failure."""

from __future__ import annotations

import json
import time
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from gateway.model_table import ModelConfig, ModelTable
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory, worker_record

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "a long story please"}]


def _wait_for_state(worker_url: str, request_id: str, state: str, within_s: float) -> dict[str, object]:
    deadline = time.monotonic() + within_s
    record = worker_record(worker_url, request_id)
    while (record is None or record["state"] != state) and time.monotonic() < deadline:
        time.sleep(0.02)
        record = worker_record(worker_url, request_id)
    assert record is not None
    assert record["state"] == state, record
    return record


def _metered(gateway: Gateway, team: str) -> dict[str, Any]:
    """The team's one usage row, once the end-of-request write has landed."""
    deadline = time.monotonic() + 15
    rows = gateway.usage(team)
    while not rows and time.monotonic() < deadline:
        time.sleep(0.05)
        rows = gateway.usage(team)
    (row,) = rows
    return row


def test_client_disconnect_closes_the_worker_connection_and_meters_what_was_sent(
    gateway: Gateway, fake_worker: str
) -> None:
    key = gateway.new_key()
    client = gateway.client(key["key"])
    response = client.chat.completions.with_streaming_response.create(
        model=FAKE_MODEL,
        messages=HELLO,
        stream=True,
        extra_headers={"x-fake-tokens": "200", "x-fake-token-delay-ms": "20"},
    )
    with response as raw:
        request_id = raw.headers["x-request-id"]
        received = 0
        for chunk in raw.parse():
            if chunk.choices and chunk.choices[0].delta.content:
                received += 1
            if received == 5:
                break
    record = _wait_for_state(fake_worker, request_id, "disconnected", within_s=15.0)
    sent = record["tokens_sent"]
    assert isinstance(sent, int)
    assert 5 <= sent < 200

    # Metered: one request, flagged as a disconnect, with the tokens the gateway relayed.
    row = _metered(gateway, key["team"])
    assert row["requests"] == 1
    assert row["disconnects"] == 1
    assert 5 <= row["completion_tokens"] <= sent
    assert row["prompt_tokens"] > 0


def test_a_finished_stream_is_not_counted_as_a_disconnect(gateway: Gateway, fake_worker: str) -> None:
    key = gateway.new_key()
    client = gateway.client(key["key"])
    with client.chat.completions.with_streaming_response.create(
        model=FAKE_MODEL, messages=HELLO, stream=True, extra_headers={"x-fake-tokens": "3"}
    ) as raw:
        request_id = raw.headers["x-request-id"]
        assert len([c for c in raw.parse() if c.choices]) == 4
    _wait_for_state(fake_worker, request_id, "completed", within_s=15.0)
    (row,) = gateway.usage(key["team"])
    assert (row["disconnects"], row["errors"], row["completion_tokens"]) == (0, 0, 3)


def test_a_client_leaving_a_non_streaming_request_cancels_the_worker_call(
    gateway: Gateway, fake_worker: str
) -> None:
    key = gateway.new_key()
    client = gateway.client(key["key"], timeout=0.5)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(
            model=FAKE_MODEL,
            messages=HELLO,
            extra_headers={
                "x-request-id": f"leave-{key['id']}",
                "x-fake-tokens": "50",
                "x-fake-token-delay-ms": "100",
            },
        )
    _wait_for_state(fake_worker, f"leave-{key['id']}", "disconnected", within_s=15.0)
    row = _metered(gateway, key["team"])
    assert (row["requests"], row["disconnects"], row["completion_tokens"]) == (1, 1, 0)


def test_streams_dropped_at_random_points_meter_what_was_relayed(gateway: Gateway, fake_worker: str) -> None:
    import random

    rng = random.Random(7)
    key = gateway.new_key()
    client = gateway.client(key["key"])
    received_total, worker_sent_total = 0, 0
    for i in range(8):
        stop_after = rng.randint(1, 30)
        request_id = f"drop-{key['id']}-{i}"
        with client.chat.completions.with_streaming_response.create(
            model=FAKE_MODEL,
            messages=HELLO,
            stream=True,
            extra_headers={"x-request-id": request_id, "x-fake-tokens": "40", "x-fake-token-delay-ms": "50"},
        ) as raw:
            received = 0
            for chunk in raw.parse():
                if chunk.choices and chunk.choices[0].delta.content:
                    received += 1
                if received == stop_after:
                    break
        record = _wait_for_state(fake_worker, request_id, "disconnected", within_s=15.0)
        sent = record["tokens_sent"]
        assert isinstance(sent, int)
        received_total += received
        worker_sent_total += sent
    row = _metered(gateway, key["team"])
    assert row["requests"] == 8
    assert row["disconnects"] == 8
    # Metered: what the gateway relayed, which is at least what the clients read before leaving
    # and at most what the worker sent.
    assert received_total <= row["completion_tokens"] <= worker_sent_total


def _leave_after(client: openai.OpenAI, model: str, chunks: int, request_id: str) -> int:
    with client.chat.completions.with_streaming_response.create(
        model=model,
        messages=HELLO,
        stream=True,
        extra_headers={"x-request-id": request_id, "x-fake-tokens": "200", "x-fake-token-delay-ms": "20"},
    ) as raw:
        received = 0
        for chunk in raw.parse():
            assert chunk.usage is None  # the per-chunk usage the gateway asked for is its own
            if chunk.choices and chunk.choices[0].delta.content:
                received += 1
            if received == chunks:
                break
    return received


@pytest.mark.parametrize("continuous", [True, False])
def test_a_client_that_leaves_is_metered_by_the_workers_own_count(
    make_gateway: GatewayFactory, fake_worker: str, continuous: bool
) -> None:
    """With continuous usage (contract SSE-10) the prompt is billed as the worker counted it, not
    as the gateway's ~4-characters-a-token estimate; without it, the estimate is all there is."""
    table = ModelTable((ModelConfig(name=FAKE_MODEL, endpoints=(fake_worker,), continuous_usage=continuous),))
    with make_gateway(table) as gw:
        key = gw.new_key()
        client = gw.client(key["key"])
        whole = client.chat.completions.create(
            model=FAKE_MODEL, messages=HELLO, extra_headers={"x-fake-tokens": "1"}
        )
        assert whole.usage is not None
        worker_prompt = whole.usage.prompt_tokens
        estimate = max(1, len(json.dumps(HELLO, separators=(",", ":"))) // 4)
        assert worker_prompt != estimate, "the test needs a prompt the two counts disagree on"
        request_id = f"exact-{key['id']}"
        received = _leave_after(client, FAKE_MODEL, 5, request_id)
        record = _wait_for_state(fake_worker, request_id, "disconnected", within_s=15.0)
        deadline = time.monotonic() + 15
        rows = gw.usage(key["team"])
        while (not rows or rows[0]["requests"] < 2) and time.monotonic() < deadline:
            time.sleep(0.05)
            rows = gw.usage(key["team"])
        (row,) = rows
        assert row["disconnects"] == 1
        left_prompt = row["prompt_tokens"] - worker_prompt
        assert left_prompt == (worker_prompt if continuous else estimate)
        left_completion = row["completion_tokens"] - 1
        sent = record["tokens_sent"]
        assert isinstance(sent, int)
        assert received <= left_completion <= sent
