"""One batch line run as a request of its batch's key and team: through the same pipeline as a
client's (gateway.proxy.pipeline), so budgets, cache salt, output caps, pricing and usage all
apply, with three differences the request's record says (`ctx.batch`): the caller is known before
(no credential read), usage is metered as api `batch` at the model's batch price, and the line
takes a free slot of the pool or none (never a place in its queue).

The line is a plain ASGI request: its body given at once, no client to leave, its answer caught by
the `send` below, which hands the whole answer to `on_answer` before the pipeline settles it, so
a line's answer is written (gateway/batch/batchstore.py) before its usage is metered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.types import Message

from gateway.http.context import RequestContext, new_request_id
from gateway.keys.auth import Principal
from gateway.proxy.dialect import Dialect
from gateway.proxy.pipeline import Pipeline
from gateway.state import AppState, RequestState

OnAnswer = Callable[[int, bytes, RequestContext], Awaitable[None]]


@dataclass
class LineAnswer:
    status: int = 0
    body: bytearray = field(default_factory=bytearray)
    delivered: bool = False


async def run_line(
    pipeline: Pipeline,
    dialect: Dialect[Any],
    path: str,
    state: AppState,
    principal: Principal,
    body: bytes,
    on_answer: OnAnswer,
) -> LineAnswer:
    ctx = RequestContext(request_id=new_request_id())
    ctx.batch = True
    request_state: RequestState = {**state, "ctx": ctx, "principal": principal}
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 0),
        "server": None,
        "state": request_state,
        "extensions": {},
    }
    given = False
    never = asyncio.Event()  # no client: the disconnect a watch waits for never comes

    async def receive() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await never.wait()
        return {"type": "http.disconnect"}

    answer = LineAnswer()

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            answer.status = message["status"]
        elif message["type"] == "http.response.body":
            answer.body += message.get("body", b"")
            if not message.get("more_body", False) and not answer.delivered:
                answer.delivered = True
                await on_answer(answer.status, bytes(answer.body), ctx)

    await pipeline.serve(dialect, scope, receive, send)
    return answer
