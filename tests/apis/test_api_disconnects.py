"""A client of Messages or Responses that leaves mid-stream, translated and native: the worker's
connection is dropped (the fake worker sees the disconnect, which is what stops an engine) and the
request is metered once, as a disconnect, with what the worker generated for it: the prompt as the
worker counted it wherever the worker said so before the end, every token the client received,
and nothing the worker never sent."""

from __future__ import annotations

import http.client
import math
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from gateway.model_table import NATIVE, ModelConfig, ModelTable, Protocols
from gateway.proxy.translation.native import text_chars
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory, worker_record

NATIVE_MODEL = "native-model"
PROMPT = "hello there gateway"  # 3 tokens at the fake worker
SLOW = {"x-fake-tokens": "300", "x-fake-token-delay-ms": "20"}


@pytest.fixture(scope="module")
def gw(make_gateway_module: GatewayFactory, fake_worker: str) -> Iterator[Gateway]:
    table = ModelTable(
        (
            ModelConfig(name=FAKE_MODEL, endpoints=(fake_worker,)),
            ModelConfig(
                name=NATIVE_MODEL,
                upstream_model=FAKE_MODEL,
                endpoints=(fake_worker,),
                protocols=Protocols(messages=NATIVE, responses=NATIVE),
            ),
        )
    )
    with make_gateway_module(table) as gateway:
        yield gateway


def _body(api: str, model: str) -> dict[str, Any]:
    if api == "messages":
        return {
            "model": model,
            "max_tokens": 500,
            "stream": True,
            "messages": [{"role": "user", "content": PROMPT}],
        }
    return {"model": model, "max_output_tokens": 500, "stream": True, "input": PROMPT}


def _is_text_delta(api: str, event: dict[str, Any]) -> bool:
    if api == "messages":
        return event.get("type") == "content_block_delta" and event["delta"].get("type") == "text_delta"
    return event.get("type") == "response.output_text.delta"


def _leave_after(gw: Gateway, key: str, api: str, model: str, deltas: int, request_id: str) -> int:
    """Reads the stream until `deltas` text deltas came, then closes the connection."""
    parts = urlsplit(gw.url)
    assert parts.hostname is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    response: http.client.HTTPResponse | None = None
    try:
        conn.request(
            "POST",
            f"/v1/{api}",
            body=orjson.dumps(_body(api, model)),
            headers={
                "content-type": "application/json",
                "x-api-key": key,
                "x-request-id": request_id,
                **SLOW,
            },
        )
        response = conn.getresponse()
        assert response.status == 200
        received = 0
        while received < deltas:
            line = response.readline()
            assert line, "the stream ended before the client left"
            if line.startswith(b"data: ") and _is_text_delta(api, orjson.loads(line[6:])):
                received += 1
        return received
    finally:
        # The response holds the socket's file too: both must close for the connection to end.
        if response is not None:
            response.close()
        conn.close()


def _disconnected(worker_url: str, client_request_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        record = worker_record(worker_url, client_request_id)
        if record is not None and record["state"] == "disconnected":
            return record
        time.sleep(0.02)
    raise AssertionError(
        f"the worker never saw the gateway leave: {worker_record(worker_url, client_request_id)}"
    )


def _metered(gw: Gateway, team: str) -> dict[str, Any]:
    deadline = time.monotonic() + 15
    rows = gw.usage(team)
    while not rows and time.monotonic() < deadline:
        time.sleep(0.05)
        rows = gw.usage(team)
    (row,) = rows
    return row


@pytest.mark.parametrize(
    ("api", "model", "exact_prompt"),
    [
        ("messages", FAKE_MODEL, True),  # translated: cumulative usage on every chunk
        ("responses", FAKE_MODEL, True),
        ("messages", NATIVE_MODEL, True),  # message_start carries the input count
        ("responses", NATIVE_MODEL, False),  # usage comes only with response.completed
    ],
)
def test_a_client_that_leaves_mid_stream_is_metered_once_with_what_it_was_sent(
    gw: Gateway, fake_worker: str, api: str, model: str, exact_prompt: bool
) -> None:
    key = gw.new_key()
    request_id = f"leave-{key['id']}"
    received = _leave_after(gw, key["key"], api, model, 5, request_id)
    record = _disconnected(fake_worker, request_id)
    row = _metered(gw, key["team"])
    assert (row["requests"], row["disconnects"]) == (1, 1)
    estimate = max(1, math.ceil(text_chars(_body(api, model)) / 4))
    assert row["prompt_tokens"] == (3 if exact_prompt else estimate)
    sent = record["tokens_sent"]
    assert isinstance(sent, int)
    assert received <= row["completion_tokens"] <= sent < 300
