"""gateway/seams/starlette.py against the installed Starlette: a stream's body messages may skip
its error middlewares' `send` wrappers, because those look at the response's start alone. The app
below sends the start through them, the body beneath them (the server's own send, as the
gateway's server offers it), then fails: the middlewares must know the answer began (no second
start, no 500 over it) and the failure must reach the server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send

from gateway.seams.starlette import DIRECT_SEND_EXTENSION, direct_send


class Failed(Exception):
    pass


async def _stream_then_fail(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    body = direct_send(scope, send)
    assert body is not send  # the server's own send, offered by the scope's extension
    await body({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
    raise Failed


def _handled(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": "handled"}, status_code=502)


def _run(app: Any) -> tuple[list[Message], BaseException | None]:
    wire: list[Message] = []

    async def server_send(message: Message) -> None:
        wire.append(message)

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    scope: Scope = {
        "type": "http",
        "method": "POST",
        "path": "/",
        "headers": [],
        "query_string": b"",
        "extensions": {DIRECT_SEND_EXTENSION: lambda: server_send},
    }
    try:
        asyncio.run(app(scope, receive, server_send))
    except BaseException as exc:
        return wire, exc
    return wire, None


def test_the_server_error_middleware_sees_the_start_and_sends_no_500_over_the_stream() -> None:
    wire, raised = _run(ServerErrorMiddleware(_stream_then_fail))
    assert isinstance(raised, Failed)
    assert [m["type"] for m in wire] == ["http.response.start", "http.response.body"]


def test_the_exception_middleware_sees_the_start_and_answers_nothing_over_the_stream() -> None:
    app = ExceptionMiddleware(_stream_then_fail, handlers={Failed: _handled})
    wire, raised = _run(app)
    # Starlette refuses to handle an exception once the answer began: the stream's start was seen.
    assert isinstance(raised, RuntimeError)
    assert "already started" in str(raised)
    assert [m["type"] for m in wire] == ["http.response.start", "http.response.body"]


@pytest.mark.parametrize("offered", [None, "not callable", lambda: None])
def test_without_a_usable_offer_the_body_goes_through_the_middleware(offered: Any) -> None:
    async def send(message: Message) -> None:
        return None

    scope: Scope = {"type": "http", "extensions": {} if offered is None else {DIRECT_SEND_EXTENSION: offered}}
    assert direct_send(scope, send) is send
