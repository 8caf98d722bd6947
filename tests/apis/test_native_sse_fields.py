"""A native stream's events reach the client with their `event:` and `data:` lines only: a worker's
`id:` would become the client's Last-Event-ID and its `retry:` the client's reconnection delay,
neither of which the gateway's client should get from a worker (the translated path writes neither).

A real gateway in front of a worker that writes both fields on every event."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from gateway.model_table import NATIVE, ModelConfig, ModelTable, Protocols
from tests.conftest import GatewayFactory
from tests.http import post
from tests.servers import run_uvicorn

MODEL = "native-sse"
pytestmark = pytest.mark.timeout(60)

MESSAGES: list[tuple[str, dict[str, Any]]] = [
    (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": MODEL,
                "content": [],
                "usage": {"input_tokens": 3, "output_tokens": 0},
            },
        },
    ),
    (
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ),
    (
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    (
        "message_delta",
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
    ),
    ("message_stop", {"type": "message_stop"}),
]
_RESPONSE = {"id": "resp_1", "object": "response", "model": MODEL, "output": []}
RESPONSES: list[tuple[str, dict[str, Any]]] = [
    (
        "response.created",
        {
            "type": "response.created",
            "sequence_number": 0,
            "response": {**_RESPONSE, "status": "in_progress"},
        },
    ),
    (
        "response.output_text.delta",
        {"type": "response.output_text.delta", "sequence_number": 1, "delta": "hi"},
    ),
    (
        "response.completed",
        {
            "type": "response.completed",
            "sequence_number": 2,
            "response": {
                **_RESPONSE,
                "status": "completed",
                "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4},
            },
        },
    ),
]


def _worker() -> Starlette:
    def stream(events: list[tuple[str, dict[str, Any]]]) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            for i, (kind, data) in enumerate(events):
                yield f"id: worker-{i}\nretry: 1\nevent: {kind}\ndata: {json.dumps(data)}\n\n".encode()

        return StreamingResponse(body(), media_type="text/event-stream")

    async def messages(request: Request) -> StreamingResponse:
        return stream(MESSAGES)

    async def responses(request: Request) -> StreamingResponse:
        return stream(RESPONSES)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({})

    return Starlette(
        routes=[
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/health", health),
        ]
    )


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/messages", {"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/responses", {"input": "hi"}),
    ],
)
def test_a_workers_id_and_retry_fields_never_reach_the_client(
    make_gateway: GatewayFactory, path: str, body: dict[str, Any]
) -> None:
    with run_uvicorn(_worker()) as worker:
        table = ModelTable(
            (
                ModelConfig(
                    name=MODEL, endpoints=(worker,), protocols=Protocols(messages=NATIVE, responses=NATIVE)
                ),
            )
        )
        with make_gateway(table) as gw:
            key = gw.new_key()["key"]
            reply = post(f"{gw.url}{path}", {"model": MODEL, "stream": True, **body}, key=key)
    assert reply.status == 200, reply.body
    events = reply.body.split(b"\n\n")
    assert [e for e in events if e.startswith(b"event:")], reply.body  # the stream came through
    lines = reply.body.split(b"\n")
    assert not [line for line in lines if line.startswith((b"id:", b"retry:"))], reply.body
    assert all(line.startswith((b"event: ", b"data: ")) for line in lines if line), reply.body
