"""Native Messages and Responses streams from a lying worker: usage reported as 0 while text
arrives is billed at least what the client received and counted as invalid usage; deltas with no
text are not output, so they do not keep a stream alive past its idle bound.

A scripted raw worker (tests/adversarial/scripted.py) behind a model served natively."""

from __future__ import annotations

import dataclasses
import http.client
import json
from typing import Any

from gateway.model_table import NATIVE, ModelTable, Protocols
from tests.adversarial.scripted import LAST_CHUNK, SSE_HEAD, ScriptedWorker, http_chunk, run_scripted, table
from tests.adversarial.test_stream_bounds import write_until_closed
from tests.conftest import GatewayFactory
from tests.pipeline.support import DEADLINE_S, metric_sum, wait_requests_metered

TEXT_EVENTS = 5


def _native(url: str, **timeouts: float) -> ModelTable:
    (model,) = table(url, **timeouts).models
    protocols = Protocols(messages=NATIVE, responses=NATIVE)
    return ModelTable((dataclasses.replace(model, protocols=protocols),))


def _sse(kind: str, payload: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **payload})}\n\n".encode()


def _stream(url: str, path: str, body: dict[str, Any], key: str) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=DEADLINE_S)
    try:
        conn.request(
            "POST",
            path,
            body=json.dumps(body).encode(),
            headers={"content-type": "application/json", "authorization": f"Bearer {key}"},
        )
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_a_messages_stream_reported_as_zero_output_is_billed_what_was_relayed(
    make_gateway: GatewayFactory,
) -> None:
    async def script(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
        events = [
            _sse(
                "message_start", {"message": {"id": "m1", "usage": {"input_tokens": 7, "output_tokens": 0}}}
            ),
            _sse("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
            *(
                _sse(
                    "content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": f"word{i} "}}
                )
                for i in range(TEXT_EVENTS)
            ),
            _sse("content_block_stop", {"index": 0}),
            _sse("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 0}}),
            _sse("message_stop", {}),
        ]
        writer.write(SSE_HEAD + b"".join(http_chunk(e) for e in events) + LAST_CHUNK)
        await writer.drain()

    with run_scripted(script) as worker, make_gateway(_native(worker.url)) as gw:
        key = gw.new_key()
        body = {
            "model": "review-model",
            "max_tokens": 64,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
        status, raw = _stream(gw.url, "/v1/messages", body, key["key"])
        assert status == 200
        assert raw.count(b"text_delta") == TEXT_EVENTS  # the client got every word
        totals = wait_requests_metered(gw, key["team"], 1)
        assert totals["completion_tokens"] >= TEXT_EVENTS
        assert metric_sum(gw, "sluicegate_upstream_errors_total", reason="invalid_usage") == 1


def test_a_zero_usage_report_before_the_text_is_still_billed_what_was_relayed(
    make_gateway: GatewayFactory,
) -> None:
    """The final usage sent first (message_delta is not the end: message_stop is), the text after
    it: what was relayed after the report counts too."""

    async def script(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
        events = [
            _sse(
                "message_start", {"message": {"id": "m1", "usage": {"input_tokens": 7, "output_tokens": 0}}}
            ),
            _sse("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 0}}),
            _sse("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
            *(
                _sse(
                    "content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": f"word{i} "}}
                )
                for i in range(TEXT_EVENTS)
            ),
            _sse("content_block_stop", {"index": 0}),
            _sse("message_stop", {}),
        ]
        writer.write(SSE_HEAD + b"".join(http_chunk(e) for e in events) + LAST_CHUNK)
        await writer.drain()

    with run_scripted(script) as worker, make_gateway(_native(worker.url)) as gw:
        key = gw.new_key()
        body = {
            "model": "review-model",
            "max_tokens": 64,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
        status, raw = _stream(gw.url, "/v1/messages", body, key["key"])
        assert status == 200
        assert raw.count(b"text_delta") == TEXT_EVENTS
        totals = wait_requests_metered(gw, key["team"], 1)
        assert totals["completion_tokens"] >= TEXT_EVENTS


def test_empty_responses_deltas_do_not_keep_a_native_stream_alive(make_gateway: GatewayFactory) -> None:
    empty = _sse(
        "response.output_text.delta", {"item_id": "i1", "output_index": 0, "content_index": 0, "delta": ""}
    )

    async def script(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
        first = _sse("response.created", {"response": {"id": "resp_1", "status": "in_progress"}})
        text = _sse(
            "response.output_text.delta",
            {"item_id": "i1", "output_index": 0, "content_index": 0, "delta": "hi"},
        )
        writer.write(SSE_HEAD + http_chunk(first) + http_chunk(text))
        await writer.drain()
        await write_until_closed(worker, reader, writer, iter(lambda: empty, None))

    with run_scripted(script) as worker, make_gateway(_native(worker.url, idle=1, first_token=20)) as gw:
        key = gw.new_key()
        body = {"model": "review-model", "input": "hi", "stream": True, "store": False}
        status, raw = _stream(gw.url, "/v1/responses", body, key["key"])
        assert status == 200
        # Ended by the gateway for want of output, the worker's connection dropped.
        last = raw.rstrip().rsplit(b"\n\n", 1)[-1]
        assert last.startswith(b"event: response.failed"), raw[-300:]
        assert b"timed out waiting for the next token" in last
        assert worker.gateway_closed.wait(DEADLINE_S)
