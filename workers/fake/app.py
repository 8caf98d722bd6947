"""A deterministic OpenAI-compatible fake LLM worker that frames its answers exactly like vLLM.

It is Sluicegate's demo worker, the upstream of the gateway's tests and the mock worker of its
benchmarks, so every answer is decided by the request and its headers alone.

Token model:
- Prompt tokens are the whitespace-separated words of all message contents (a string, or the
  `{"type": "text"}` parts of a list) for chat, of `prompt` (a string or a list of strings) for
  completions and of `input` for embeddings; at least 1.
- Completion token i (0-based) is the text `f"tok{i} "`. There are `x-fake-tokens` of them (default
  8), capped by `max_completion_tokens` / `max_tokens`; finish_reason is "length" when the cap
  bit, else "stop".
- An injected tool call always takes 2 completion tokens (its arguments `{"x": 1}` are streamed in
  two fragments) and finishes with "tool_calls".
- With `stream_options: {"include_usage": true, "continuous_usage_stats": true}` every chunk also
  carries the usage so far, as vLLM's do: token i's chunk counts i + 1, the role chunk 0.

Programming headers (all optional):
- `x-fake-tokens: N`: completion tokens to generate.
- `x-fake-token-delay-ms: MS`: each token takes MS to generate; a stream sleeps before every token,
  a non-stream answer waits for all of them.
- `x-fake-first-token-delay-ms: MS`: extra wait before generation starts; a stream has already
  sent its headers, and sends the assistant role chunk when the wait ends.
- `x-fake-status: CODE` (400-599): answer at once with CODE and an error envelope; 429 and 503
  add `Retry-After: 1`.
- `x-fake-fail-after: N`: a stream sends min(N, tokens) token chunks, then the connection is
  dropped (no finish chunk, no [DONE], no terminating HTTP chunk); a non-stream answer is a 500.
- `x-fake-error-event-after: N`: a stream sends min(N, tokens) token chunks, then one vLLM error
  event and `data: [DONE]`; a non-stream answer is a 500.
- `x-fake-stall: 1`: send nothing for 600 s (headers included), or until the client leaves.
- `x-fake-tool-call: NAME`: if the chat request's `tools` has a function NAME, call it.
- `x-fake-reasoning: N`: the first min(N, tokens) chat tokens are reasoning (a tool call has
  none). `x-fake-reasoning-as: field` (default) sends them as `delta.reasoning_content`
  (`message.reasoning_content` when not streaming), as vLLM with a reasoning parser does;
  `tags` sends them in the content as a model without one writes them: `<think>` opening the
  first, `</think>` closing the last.

Every POST is recorded under its `x-request-id` (one is generated when absent; either is echoed in
the response headers) and can be read back from `GET /fake/requests/{request_id}`.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
import uuid
from collections.abc import Sequence
from functools import partial
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Send

from workers.common import framing
from workers.common.errors import RequestError, bad_request, error_envelope
from workers.common.framing import ChatFrames, CompletionFrames
from workers.common.streaming import ASGIResponse, run_unless_disconnected
from workers.fake.aborts import InjectedAbort
from workers.fake.generation import Frames, answer_body, produce_stream
from workers.fake.plan import (
    Plan,
    chat_prompt_tokens,
    completion_prompt_tokens,
    injected_status,
    make_plan,
    string_list,
)
from workers.fake.records import RequestRecord, RequestRecords, RunningGauge

STALL_S = 600.0
EMBEDDING_DIM = 8
# Answered to a client that has already gone; the server discards it.
_GONE_STATUS = 499


def _json(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(payload), status, headers, media_type="application/json")


def embed(text: str) -> list[float]:
    """A unit vector derived from a hash of `text`: equal inputs, equal vectors."""
    digest = hashlib.sha256(text.encode()).digest()
    raw = [int.from_bytes(digest[i * 4 : i * 4 + 4], "big") / 0x7FFFFFFF - 1.0 for i in range(EMBEDDING_DIM)]
    norm = math.sqrt(sum(v * v for v in raw)) or 1.0
    return [v / norm for v in raw]


class _Worker:
    def __init__(self, model_names: Sequence[str]) -> None:
        if not model_names:
            raise ValueError("the fake worker needs at least one model name")
        self.model_names = tuple(model_names)
        self.records = RequestRecords()
        self.gauge = RunningGauge(self.model_names)

    async def health(self, request: Request) -> Response:
        return _json({"status": "ok"})

    async def models(self, request: Request) -> Response:
        created = int(time.time())
        data = [
            {"id": name, "object": "model", "created": created, "owned_by": "sluicegate-fake"}
            for name in self.model_names
        ]
        return _json({"object": "list", "data": data})

    async def metrics(self, request: Request) -> Response:
        return Response(self.gauge.render(), media_type="text/plain; version=0.0.4")

    async def request_record(self, request: Request) -> Response:
        request_id = request.path_params["request_id"]
        record = self.records.get(request_id)
        if record is None:
            message = f"no request with id `{request_id}` was received"
            return _json(error_envelope(message, "NotFoundError", 404), 404)
        return Response(record.to_json(), media_type="application/json")

    async def chat(self, request: Request) -> Response:
        return await self._generate(request, chat=True)

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, chat=False)

    async def embeddings(self, request: Request) -> Response:
        record = await self._intake(request)
        if record is None:
            return Response(status_code=_GONE_STATUS)
        try:
            body = self._json_body(record)
            inputs = string_list(body, "input")
            model = self._model(body)
        except RequestError as err:
            return self._error(record, err)
        data = [
            {"index": i, "object": "embedding", "embedding": embed(text)} for i, text in enumerate(inputs)
        ]
        prompt_tokens = max(sum(len(text.split()) for text in inputs), 1)
        payload = {
            "id": f"embd-{uuid.uuid4().hex}",
            "object": "list",
            "created": int(time.time()),
            "model": model,
            "data": data,
            "usage": framing.usage(prompt_tokens, 0, with_details=True),
        }
        record.finish("completed", 200)
        return _json(payload, headers={"x-request-id": record.request_id})

    async def _intake(self, request: Request) -> RequestRecord | None:
        headers = dict(request.headers.items())
        request_id = headers.get("x-request-id") or uuid.uuid4().hex
        try:
            raw = await request.body()
        except ClientDisconnect:
            return None
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        record = RequestRecord(request_id, request.url.path, headers, body)
        self.records.add(record)
        return record

    def _json_body(self, record: RequestRecord) -> dict[str, Any]:
        injected = injected_status(record.headers)
        if injected is not None:
            raise injected
        if not isinstance(record.body, dict):
            raise bad_request("the request body must be a JSON object")
        return record.body

    def _model(self, body: dict[str, Any]) -> str:
        model = body.get("model")
        if model is None:
            # vLLM serves its first model name when the request names none.
            return self.model_names[0]
        if not isinstance(model, str):
            raise bad_request("model must be a string", "model")
        if model not in self.model_names:
            raise RequestError(404, f"The model `{model}` does not exist.", "model")
        return model

    def _error(self, record: RequestRecord, err: RequestError) -> Response:
        record.finish("failed", err.status)
        headers = {"x-request-id": record.request_id}
        if err.status in (429, 503):
            headers["retry-after"] = "1"
        return _json(err.envelope(), err.status, headers)

    async def _generate(self, request: Request, *, chat: bool) -> Response:
        record = await self._intake(request)
        if record is None:
            return Response(status_code=_GONE_STATUS)
        try:
            body = self._json_body(record)
            prompt_tokens = chat_prompt_tokens(body) if chat else completion_prompt_tokens(body)
            model = self._model(body)
            plan = make_plan(record.headers, body, chat=chat)
        except RequestError as err:
            return self._error(record, err)
        response_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        if body.get("stream") is not True:
            return await self._complete(
                request.receive, record, plan, chat, response_id, created, model, prompt_tokens
            )
        options = body.get("stream_options")
        options = options if isinstance(options, dict) else {}
        include_usage = options.get("include_usage") is True
        # As in vLLM, continuous_usage_stats counts only together with include_usage.
        continuous = include_usage and options.get("continuous_usage_stats") is True
        frames = (ChatFrames if chat else CompletionFrames)(
            response_id, created, model, continuous_usage=prompt_tokens if continuous else None
        )
        serve = partial(self._stream, record, plan, frames, model, prompt_tokens, include_usage)
        return ASGIResponse(serve)

    async def _stall(self, receive: Receive) -> bool:
        return await run_unless_disconnected(asyncio.sleep(STALL_S), receive)

    async def _complete(
        self,
        receive: Receive,
        record: RequestRecord,
        plan: Plan,
        chat: bool,
        response_id: str,
        created: int,
        model: str,
        prompt_tokens: int,
    ) -> Response:
        tokens = plan.tokens_to_send
        delay = plan.first_token_delay_s + tokens * plan.token_delay_s
        with self.gauge.track(model):
            if (plan.stall and not await self._stall(receive)) or (
                delay > 0 and not await run_unless_disconnected(asyncio.sleep(delay), receive)
            ):
                record.finish("disconnected")
                return Response(status_code=_GONE_STATUS)
        if plan.failure_at is not None:
            message = f"fake worker: injected failure after {tokens} tokens"
            return self._error(record, RequestError(500, message))
        body = answer_body(
            plan,
            chat=chat,
            response_id=response_id,
            created=created,
            model=model,
            prompt_tokens=prompt_tokens,
        )
        record.tokens_sent = tokens
        record.finish("completed", 200)
        headers = {"x-request-id": record.request_id}
        return Response(body, media_type="application/json", headers=headers)

    async def _stream(
        self,
        record: RequestRecord,
        plan: Plan,
        frames: Frames,
        model: str,
        prompt_tokens: int,
        include_usage: bool,
        receive: Receive,
        send: Send,
    ) -> None:
        with self.gauge.track(model):
            if plan.stall and not await self._stall(receive):
                record.finish("disconnected")
                return
            headers = [
                (b"content-type", framing.SSE_CONTENT_TYPE.encode()),
                (b"x-request-id", record.request_id.encode("latin-1")),
            ]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            record.status = 200
            produce = produce_stream(record, plan, frames, prompt_tokens, include_usage, send)
            try:
                finished = await run_unless_disconnected(produce, receive)
            except InjectedAbort:
                record.finish("failed")
                raise
        if not finished:
            record.finish("disconnected")
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def create_app(model_names: Sequence[str] = ("fake-model",)) -> Starlette:
    """A fresh worker serving `model_names`; all its state lives on this app (`.state.worker`)."""
    worker = _Worker(model_names)
    routes = [
        Route("/health", worker.health, methods=["GET"]),
        Route("/v1/models", worker.models, methods=["GET"]),
        Route("/metrics", worker.metrics, methods=["GET"]),
        Route("/fake/requests/{request_id}", worker.request_record, methods=["GET"]),
        Route("/v1/chat/completions", worker.chat, methods=["POST"]),
        Route("/v1/completions", worker.completions, methods=["POST"]),
        Route("/v1/embeddings", worker.embeddings, methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    app.state.worker = worker
    return app
