"""The Reframr worker: Reframr behind the shared worker contract, framed exactly like vLLM.

Routes: `POST /v1/chat/completions`, `POST /v1/completions` (stream or not), `GET /v1/models`,
`GET /health` (200 once the engine is loaded, 503 before or when loading failed), `GET /metrics`.

A generation request is validated (400 / 404, `workers.reframr.request`), then admitted to the
engine's queue synchronously (429 with Retry-After when one runs and `max_queue` wait), then waits
its turn and runs (`workers.reframr.scheduler`). A client that leaves while waiting is dropped from
the queue; one that leaves mid-generation stops it at the next token (token engines). Every
response echoes `x-request-id` (one is made up when the request has none), and carries
`x-usage-estimated: true` (the contract's USE-4) when the engine has no tokenizer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Send

from workers.common import framing
from workers.common.errors import RequestError
from workers.common.framing import ChatFrames, CompletionFrames
from workers.common.streaming import ASGIResponse, run_unless_disconnected
from workers.reframr.answer import Answer, SSESink, answer_body, produce
from workers.reframr.engine import Engine, EngineLoader, Tokenizer, count_tokens, streaming_mode
from workers.reframr.metrics import CONTENT_TYPE, WorkerMetrics
from workers.reframr.request import Order, fit_context, parse_order
from workers.reframr.scheduler import EngineRunner, Ticket

logger = logging.getLogger("workers.reframr")

DEFAULT_MAX_QUEUE = 8
# Answered to a client that has already gone; the server discards it.
_GONE_STATUS = 499
_RETRY_AFTER_S = {429: "1", 503: "5"}


def _json(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(payload), status, headers, media_type="application/json")


def _error(err: RequestError, headers: dict[str, str]) -> Response:
    if err.status in _RETRY_AFTER_S:
        headers = {**headers, "retry-after": _RETRY_AFTER_S[err.status]}
    return _json(err.envelope(), err.status, headers)


class _Worker:
    def __init__(
        self, engine: Engine | EngineLoader, model_name: str, max_queue: int, max_model_len: int | None
    ) -> None:
        if max_queue < 0:
            raise ValueError("max_queue must be >= 0")
        self.model_name = model_name
        self.max_model_len = max_model_len
        self.runner = EngineRunner(max_queue)
        self.loader = engine if isinstance(engine, EngineLoader) else None
        self.engine: Engine | None = None if isinstance(engine, EngineLoader) else engine
        self.load_error: str | None = None
        slot = self.runner.slot
        self.stats = WorkerMetrics(
            model_name,
            running=lambda: slot.running,
            waiting=lambda: slot.waiting,
            mode=lambda: None if self.engine is None else streaming_mode(self.engine),
        )

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        loading = asyncio.create_task(self._load()) if self.loader is not None else None
        try:
            yield
        finally:
            if loading is not None:
                loading.cancel()
            self.runner.close()

    async def _load(self) -> None:
        assert self.loader is not None
        # On the engine thread: nothing else can use it before the engine exists.
        started = time.perf_counter()
        try:
            engine = await asyncio.wrap_future(self.runner.executor.submit(self.loader.load))
        except Exception as exc:
            self.load_error = f"{type(exc).__name__}: {exc}"
            logger.error("loading %s failed: %s", self.loader.description, self.load_error)
            return
        self.engine = engine
        logger.info("%s loaded in %.1f s", self.loader.description, time.perf_counter() - started)

    async def health(self, request: Request) -> Response:
        if self.engine is not None:
            return _json({"status": "ok"})
        if self.load_error is not None:
            return _json({"status": "failed", "error": self.load_error}, 503)
        return _json({"status": "loading"}, 503, {"retry-after": _RETRY_AFTER_S[503]})

    async def models(self, request: Request) -> Response:
        card: dict[str, Any] = {
            "id": self.model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "reframr",
        }
        if self.max_model_len is not None:
            card["max_model_len"] = self.max_model_len
        return _json({"object": "list", "data": [card]})

    async def metrics(self, request: Request) -> Response:
        return Response(self.stats.render(), media_type=CONTENT_TYPE)

    async def chat(self, request: Request) -> Response:
        return await self._generate(request, chat=True)

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, chat=False)

    def _ready_engine(self) -> Engine:
        if self.engine is None:
            state = "failed to load" if self.load_error is not None else "is still loading"
            raise RequestError(503, f"the Reframr engine {state}")
        return self.engine

    async def _generate(self, request: Request, *, chat: bool) -> Response:
        headers = {"x-request-id": request.headers.get("x-request-id") or uuid.uuid4().hex}
        try:
            raw = await request.body()
        except ClientDisconnect:
            return Response(status_code=_GONE_STATUS)
        try:
            order = parse_order(raw, self.model_name, chat=chat)
            engine = self._ready_engine()
            # USE-1 wants at least 1, as vLLM's count (with its BOS token) always is.
            prompt_tokens = max(count_tokens(engine, order.job.context), 1)
            order = fit_context(order, prompt_tokens, self.max_model_len)
        except RequestError as err:
            return _error(err, headers)
        if not isinstance(engine, Tokenizer):
            headers["x-usage-estimated"] = "true"
        ticket = self.runner.slot.admit()
        if ticket is None:
            queue = self.runner.slot.max_queue
            message = f"the Reframr worker is full: 1 generation running and {queue} waiting"
            return _error(RequestError(429, message), headers)
        call = _Call(self, engine, order, ticket, prompt_tokens, headers["x-request-id"])
        if order.stream:
            return ASGIResponse(partial(call.stream, headers))
        return await call.complete(request.receive, headers)


class _Call:
    """One admitted generation request; it owns its ticket until the engine thread takes it."""

    def __init__(
        self,
        worker: _Worker,
        engine: Engine,
        order: Order,
        ticket: Ticket,
        prompt_tokens: int,
        request_id: str,
    ) -> None:
        self.worker = worker
        self.engine = engine
        self.order = order
        self.ticket = ticket
        self.admitted = time.perf_counter()
        self.response_id = f"{'chatcmpl' if order.chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.prompt_tokens = prompt_tokens
        self.request_id = request_id

    async def _run(self, receive: Receive, sink: SSESink | None) -> Answer | None:
        """The answer, or None when the client left first. Engine errors propagate."""
        answers: list[Answer] = []

        async def work() -> None:
            answers.append(
                await produce(
                    self.worker.runner,
                    self.engine,
                    self.order,
                    self.ticket,
                    admitted=self.admitted,
                    ttft=self.worker.stats.ttft,
                    sink=sink,
                )
            )

        try:
            finished = await run_unless_disconnected(work(), receive)
        finally:
            self.worker.runner.slot.abandon(self.ticket)
        return answers[0] if finished else None

    async def complete(self, receive: Receive, headers: dict[str, str]) -> Response:
        try:
            answer = await self._run(receive, None)
        except Exception as exc:
            logger.exception("generation %s failed", self.request_id)
            return _error(RequestError(500, f"generation failed: {type(exc).__name__}: {exc}"), headers)
        if answer is None:
            return Response(status_code=_GONE_STATUS)
        body = answer_body(self.order, self.response_id, self.created, answer, self.prompt_tokens)
        return Response(body, media_type="application/json", headers=headers)

    async def stream(self, headers: dict[str, str], receive: Receive, send: Send) -> None:
        frames_type = ChatFrames if self.order.chat else CompletionFrames
        continuous = self.prompt_tokens if self.order.continuous_usage else None
        frames = frames_type(self.response_id, self.created, self.order.model, continuous_usage=continuous)
        sink = SSESink(send, frames)
        raw_headers = [(b"content-type", framing.SSE_CONTENT_TYPE.encode())]
        raw_headers += [(name.encode(), value.encode("latin-1")) for name, value in headers.items()]
        try:
            await send({"type": "http.response.start", "status": 200, "headers": raw_headers})
            try:
                answer = await self._run(receive, sink)
            except Exception as exc:
                logger.exception("generation %s failed mid-stream", self.request_id)
                await sink.emit(framing.sse_error(f"generation failed: {exc}", "InternalServerError", 500))
                await sink.emit(framing.SSE_DONE)
            else:
                if answer is None:
                    return
                await sink.finish(answer, self.prompt_tokens, self.order.include_usage)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.worker.runner.slot.abandon(self.ticket)


def create_app(
    engine: Engine | EngineLoader,
    model_name: str,
    *,
    max_queue: int = DEFAULT_MAX_QUEUE,
    max_model_len: int | None = None,
) -> Starlette:
    """A worker serving `engine` as `model_name`; all its state lives on this app (`.state.worker`).

    Pass an `EngineLoader` to load in the background: `/health` answers 503 until it is done.
    `max_model_len` (prompt + completion tokens) is enforced and listed on `/v1/models` when given.
    """
    worker = _Worker(engine, model_name, max_queue, max_model_len)
    routes = [
        Route("/health", worker.health, methods=["GET"]),
        Route("/v1/models", worker.models, methods=["GET"]),
        Route("/metrics", worker.metrics, methods=["GET"]),
        Route("/v1/chat/completions", worker.chat, methods=["POST"]),
        Route("/v1/completions", worker.completions, methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=worker.lifespan)
    app.state.worker = worker
    return app
