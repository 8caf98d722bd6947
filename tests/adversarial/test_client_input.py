"""Hostile client input that the gateway accepts as valid JSON but then cannot handle: a 500
(`internal_error`, an ERROR log line with a traceback) instead of a 400 or a relayed answer.

orjson parses JSON nested up to 1024 levels, but `orjson.dumps` refuses anything nested deeper than
254. The gateway re-encodes the client's payload (`OpenAICall.estimated_prompt_tokens` dumps the
messages; `OpenAICall.worker_body` dumps the whole payload for every stream and every renamed
model), so a body nested 300 deep passes `parse` and then raises TypeError."""

from __future__ import annotations

from typing import Any

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
from tests.http import post
from tests.pipeline.support import CHAT, wait_inflight_zero

DEPTH = 300  # > 254 (orjson.dumps) and < 1024 (orjson.loads)


def _nested() -> Any:
    value: Any = "x"
    for _ in range(DEPTH):
        value = [value]
    return value


async def _ok_stream(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
    body = event(content_chunk("hi")) + event(usage_chunk(3, 1)) + DONE
    writer.write(SSE_HEAD + http_chunk(body) + LAST_CHUNK)
    await writer.drain()


BODIES = {
    # An unknown field: passes through to the worker unchanged, as docs/api.md promises...
    "unknown-field-on-a-stream": {
        "model": MODEL,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
        "metadata": _nested(),
    },
    # ...or a message part: the prompt estimate dumps the messages before admission.
    "nested-message-content": {
        "model": MODEL,
        "messages": [{"role": "user", "content": _nested()}],
    },
}


@pytest.mark.parametrize("name", list(BODIES))
def test_a_deeply_nested_but_valid_body_is_not_a_500(make_gateway: GatewayFactory, name: str) -> None:
    with run_scripted(_ok_stream) as worker, make_gateway(table(worker.url)) as gw:
        key = gw.new_key()["key"]
        reply = post(f"{gw.url}{CHAT}", BODIES[name], key=key)
        assert reply.status != 500, (
            f"a client body nested {DEPTH} deep ({name}) got a 500 internal_error from the gateway: any key "
            f"holder can make 5xx alerts fire and ERROR tracebacks pile up ({reply.body[:200]!r})"
        )
        assert reply.status in (200, 400), f"{name}: {reply.status} {reply.body[:200]!r}"
        wait_inflight_zero(gw)


def test_a_model_name_a_megabyte_long_is_not_echoed_whole(make_gateway: GatewayFactory) -> None:
    """The client chooses the model name; the 404 echoes it, bounded, never as sent."""
    with make_gateway() as gw:
        key = gw.new_key()["key"]
        name = "m" * 1_000_000
        reply = post(
            f"{gw.url}{CHAT}", {"model": name, "messages": [{"role": "user", "content": "hi"}]}, key=key
        )
        assert reply.status == 404
        assert len(reply.body) < 2_000, f"a {len(reply.body)}-byte error body for a 404"
        assert b"model_not_found" in reply.body
