"""A small programmable worker for routing tests and the routing benchmark.

Unlike the fake worker (programmed per request by headers), this one is programmed per process,
which is what routing needs: one endpoint slow, one failing, one stalled. It models an engine with
`capacity` generation slots: requests beyond it wait, and `/metrics` shows running and waiting
under the contract's names (workers/CONTRACT.md, "Load metrics").

Two request headers (the gateway forwards them) make one request fail the way a client's own
request can: `x-worker-fail-status: 500` answers it with that status; `x-worker-stall: head` or
`first-event` holds its answer, or its stream's first event, until the gateway hangs up.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route


class ProgrammableWorker:
    def __init__(
        self, models: tuple[str, ...] = ("m",), *, delay_s: float = 0.0, capacity: int = 1000, tokens: int = 2
    ) -> None:
        self.models = models
        self.delay_s = delay_s
        self.capacity = capacity
        self.tokens = tokens
        self.fail_status: int | None = None  # answer every generation with this status
        self.health_status = 200
        self.health_probes = 0  # GET /health received
        self.health_delay_s = 0.0  # each /health answer takes this long
        self.health_hang = False  # /health answers only once this is cleared
        self.metrics_scrapes = 0  # GET /metrics received
        self.metrics_hang = False  # /metrics answers only once this is cleared
        self.stall = False  # generations never answer (/health still does)
        # Generations that got a slot keep it while this is set: a queue that lasts until a test
        # lets it go, however long the test's own requests take.
        self.hold = False
        self.requests = 0  # generation requests received
        self.by_model: Counter[str] = Counter()
        self.by_user: Counter[str] = Counter()
        self.arrivals: list[str] = []  # each generation request's `user`, in the order they came
        self.running = 0
        self.waiting = 0
        self._slots: asyncio.Semaphore | None = None
        self._ids = itertools.count()

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/models", self.list_models, methods=["GET"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/metrics", self.metrics, methods=["GET"]),
            ]
        )

    async def _stall(self) -> None:
        # Polled, not an Event: the flag is flipped from the test's thread, not this loop.
        while self.stall:  # noqa: ASYNC110
            await asyncio.sleep(0.05)

    async def list_models(self, request: Request) -> Response:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "test"} for m in self.models]
        return Response(orjson.dumps({"object": "list", "data": data}), media_type="application/json")

    async def health(self, request: Request) -> Response:
        self.health_probes += 1
        await asyncio.sleep(self.health_delay_s)
        # Polled, not an Event: the flag is flipped from the test's thread, not this loop.
        while self.health_hang:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        return Response(b"{}", status_code=self.health_status, media_type="application/json")

    async def metrics(self, request: Request) -> Response:
        self.metrics_scrapes += 1
        while self.metrics_hang:  # noqa: ASYNC110 (flipped from the test's thread)
            await asyncio.sleep(0.05)
        lines = [
            f'vllm:num_requests_running{{model_name="{m}",engine="0"}} {self.running if i == 0 else 0}'
            for i, m in enumerate(self.models)
        ]
        lines += [f'vllm:num_requests_waiting{{model_name="{self.models[0]}",engine="0"}} {self.waiting}']
        lines += [f'vllm:kv_cache_usage_perc{{model_name="{self.models[0]}"}} {min(self.running, 1)}']
        return Response("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    async def chat(self, request: Request) -> Response:
        body: dict[str, Any] = orjson.loads(await request.body())
        self.requests += 1
        model = body.get("model")
        self.by_model[str(model)] += 1
        self.by_user[str(body.get("user"))] += 1
        self.arrivals.append(str(body.get("user")))
        await self._stall()
        stall = request.headers.get("x-worker-stall")
        if stall == "head":
            await _until_disconnected(request)
        fail_status = int(request.headers.get("x-worker-fail-status", 0)) or self.fail_status
        if fail_status is not None:
            error = {"error": {"message": "injected", "type": "server_error", "code": fail_status}}
            return Response(orjson.dumps(error), status_code=fail_status, media_type="application/json")
        if model not in self.models:
            return Response(b'{"error": {"message": "no such model"}}', 404, media_type="application/json")
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.capacity)
        self.waiting += 1
        async with self._slots:
            self.waiting -= 1
            self.running += 1
            try:
                await asyncio.sleep(self.delay_s)
                # Polled, not an Event: the flag is flipped from the test's thread, not this loop.
                while self.hold:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
            finally:
                self.running -= 1
        ident = f"c-{next(self._ids)}"
        if body.get("stream"):
            events = self._events(ident, str(model), stall_first=stall == "first-event")
            return StreamingResponse(events, media_type="text/event-stream")
        answer = {
            "id": ident,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        return Response(orjson.dumps(answer), media_type="application/json")

    async def _events(self, ident: str, model: str, *, stall_first: bool) -> Any:
        if stall_first:
            # The head is out; Starlette cancels this generator when the gateway hangs up.
            await asyncio.sleep(_STALL_S)
        base = {"id": ident, "object": "chat.completion.chunk", "created": 0, "model": model}
        for i in range(self.tokens):
            delta = {"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}
            yield b"data: " + orjson.dumps({**base, "choices": [delta]}) + b"\n\n"
        last = {"index": 0, "delta": {}, "finish_reason": "stop"}
        yield b"data: " + orjson.dumps({**base, "choices": [last]}) + b"\n\n"
        usage = {"prompt_tokens": 1, "completion_tokens": self.tokens, "total_tokens": 1 + self.tokens}
        yield b"data: " + orjson.dumps({**base, "choices": [], "usage": usage}) + b"\n\n"
        yield b"data: [DONE]\n\n"


# Longer than any test's deadlines: a stalled answer ends when the gateway hangs up, not before.
_STALL_S = 60.0


async def _until_disconnected(request: Request) -> None:
    for _ in range(int(_STALL_S / 0.05)):
        if await request.is_disconnected():
            return
        await asyncio.sleep(0.05)
