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
- `x-fake-hold-after: N`: a stream sends min(N, tokens) token chunks (the role chunk or opening
  events first), then nothing more for 600 s or until the client leaves (a non-stream answer
  ignores it): what reached the client by then was relayed while the worker was still generating.
- `x-fake-tool-call: NAME`: if the chat request's `tools` has a function NAME, call it (chat only;
  an agent cannot send it: its tool round trip is the `sluicegate-read:<path>` prompt marker,
  workers/fake/agent_turns.py).
- `x-fake-reasoning: N`: the first min(N, tokens) chat tokens are reasoning (a tool call has
  none). `x-fake-reasoning-as: field` (default) sends them as `delta.reasoning_content`
  (`message.reasoning_content` when not streaming), as vLLM with a reasoning parser does;
  `tags` sends them in the content as a model without one writes them: `<think>` opening the
  first, `</think>` closing the last.

Native dialects, framed as vLLM 0.32 frames them (details in their modules):
- `POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic Messages
  (`workers/fake/messages.py`); `event:`-named SSE, no `[DONE]`.
- `POST /v1/responses`, `GET`/`DELETE /v1/responses/{id}`, `POST /v1/responses/{id}/cancel`,
  `GET /v1/responses/{id}/input_items`: OpenAI Responses (`workers/fake/responses.py`); finished
  responses are stored in this worker's memory unless `"store": false`, and no other worker
  (process or app) sees them.
- `POST /tokenize` (vLLM's): `{"model", "messages"}` or `{"model", "prompt"}` answers `{"count",
  "max_model_len", "tokens", "token_strs": null}`, `count` being the `prompt_tokens` a chat
  (completion) request with those messages (prompt) reports.
The timing and failure headers (`x-fake-tokens`, the delays, `x-fake-status`, `x-fake-fail-after`,
`x-fake-error-event-after` as the dialect's error event, `x-fake-stall`) work on them too.

Every POST is recorded under its `x-request-id` (one is generated when absent; either is echoed in
the response headers) and can be read back from `GET /fake/requests/{request_id}`.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from functools import partial
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Send

from workers.common import framing
from workers.common.errors import RequestError, bad_request, error_envelope, validation_error
from workers.common.framing import ChatFrames, CompletionFrames
from workers.common.streaming import ASGIResponse, run_unless_disconnected
from workers.fake import messages, responses, stored
from workers.fake.aborts import InjectedAbort
from workers.fake.agent_turns import scripted
from workers.fake.generation import NativeEvents, answer_body, produce_native_stream, produce_stream
from workers.fake.plan import (
    STALL_S,
    Plan,
    chat_prompt_tokens,
    completion_prompt_tokens,
    injected_status,
    make_plan,
    string_list,
)
from workers.fake.records import RequestRecord, RequestRecords, RunningGauge
from workers.fake.stored import ResponseStore

EMBEDDING_DIM = 8
MAX_MODEL_LEN = 131072
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


class FakeWorker:
    """The worker's state (records, gauges, stored responses) and the plumbing its routes share."""

    def __init__(self, model_names: Sequence[str], max_model_len: int) -> None:
        if not model_names:
            raise ValueError("the fake worker needs at least one model name")
        self.model_names = tuple(model_names)
        self.max_model_len = max_model_len
        self.records = RequestRecords()
        self.gauge = RunningGauge(self.model_names)
        self.responses = ResponseStore()

    async def health(self, request: Request) -> Response:
        return _json({"status": "ok"})

    async def models(self, request: Request) -> Response:
        created = int(time.time())
        data = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "sluicegate-fake",
                "max_model_len": self.max_model_len,  # as vLLM reports it
            }
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
        record = await self.intake(request)
        if record is None:
            return self.gone()
        try:
            body = self.json_body(record)
            inputs = string_list(body, "input")
            model = self.model_of(body)
        except RequestError as err:
            return self.error(record, err)
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
        return self.json(payload, record)

    async def tokenize(self, request: Request) -> Response:
        record = await self.intake(request)
        if record is None:
            return self.gone()
        try:
            body = self.json_body(record, validation=True)
            if body.get("messages") is not None:
                count = chat_prompt_tokens(body)
            elif isinstance(body.get("prompt"), str):
                count = completion_prompt_tokens(body)
            else:
                raise validation_error("prompt", "prompt (a string) or messages: Field required")
            self.model_of(body)
        except RequestError as err:
            return self.error(record, err)
        record.finish("completed", 200)
        tokens = [_token_id(i) for i in range(count)]
        answer = {"count": count, "max_model_len": self.max_model_len, "tokens": tokens, "token_strs": None}
        return self.json(answer, record)

    # --- shared by every route -------------------------------------------------------------------

    @staticmethod
    def new_id(prefix: str) -> str:
        return f"{prefix}{uuid.uuid4().hex[:16]}"

    @staticmethod
    def gone() -> Response:
        return Response(status_code=_GONE_STATUS)

    @staticmethod
    def json(payload: Any, record: RequestRecord | None = None) -> Response:
        return _json(payload, headers=None if record is None else {"x-request-id": record.request_id})

    async def intake(self, request: Request) -> RequestRecord | None:
        """Read and record the request; None when its client left before the body arrived."""
        headers = dict(request.headers.items())
        request_id = headers.get("x-request-id") or uuid.uuid4().hex
        try:
            raw = await request.body()
        except ClientDisconnect:
            return None
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = None
        record = RequestRecord(request_id, request.url.path, headers, body)
        self.records.add(record)
        return record

    def json_body(self, record: RequestRecord, *, validation: bool = False) -> dict[str, Any]:
        """The request's JSON object, after `x-fake-status`; `validation`: a body that is not one is
        refused as vLLM's request validation refuses it (see `validation_error`)."""
        injected = injected_status(record.headers)
        if injected is not None:
            raise injected
        if not isinstance(record.body, dict):
            if validation:
                message = "JSON decode error: the request body must be a JSON object"
                raise RequestError(400, message, "body", err_type="Bad Request", validation=True)
            raise bad_request("the request body must be a JSON object")
        return record.body

    def model_of(self, body: dict[str, Any]) -> str:
        model = body.get("model")
        if model is None:
            # vLLM serves its first model name when the request names none.
            return self.model_names[0]
        if not isinstance(model, str):
            raise bad_request("model must be a string", "model")
        if model not in self.model_names:
            raise RequestError(404, f"The model `{model}` does not exist.", "model")
        return model

    def error(self, record: RequestRecord | None, err: RequestError, *, anthropic: bool = False) -> Response:
        """The error answer: the OpenAI envelope, or with `anthropic` vLLM's Messages error body
        for errors its handler finds (validation errors stay in the envelope there too)."""
        headers = {}
        if record is not None:
            record.finish("failed", err.status)
            headers["x-request-id"] = record.request_id
        if err.status in (429, 503):
            headers["retry-after"] = "1"
        body = messages.error_body(err) if anthropic and not err.validation else err.envelope()
        return _json(body, err.status, headers)

    async def whole(
        self,
        receive: Receive,
        record: RequestRecord,
        plan: Plan,
        model: str,
        build: Callable[[], bytes],
        *,
        anthropic: bool = False,
    ) -> Response:
        """A non-stream answer: wait as long as the generation takes, then `build()` it (or fail
        as the plan says)."""
        tokens = plan.tokens_to_send
        delay = plan.first_token_delay_s + tokens * plan.token_delay_s
        with self.gauge.track(model):
            if (plan.stall and not await self._stall(receive)) or (
                delay > 0 and not await run_unless_disconnected(asyncio.sleep(delay), receive)
            ):
                record.finish("disconnected")
                return self.gone()
        if plan.failure_at is not None:
            message = f"fake worker: injected failure after {tokens} tokens"
            return self.error(record, RequestError(500, message), anthropic=anthropic)
        body = build()
        record.tokens_sent = tokens
        record.finish("completed", 200)
        headers = {"x-request-id": record.request_id}
        return Response(body, media_type="application/json", headers=headers)

    def native_stream(self, record: RequestRecord, plan: Plan, model: str, events: NativeEvents) -> Response:
        async def produce(send: Send) -> None:
            await produce_native_stream(record, plan, events, send)

        return ASGIResponse(partial(self._stream, record, plan, model, produce))

    # --- chat and completions --------------------------------------------------------------------

    async def _generate(self, request: Request, *, chat: bool) -> Response:
        record = await self.intake(request)
        if record is None:
            return self.gone()
        try:
            body = self.json_body(record)
            prompt_tokens = chat_prompt_tokens(body) if chat else completion_prompt_tokens(body)
            model = self.model_of(body)
            plan = make_plan(record.headers, body, chat=chat)
            self.check_context(body, prompt_tokens)
        except RequestError as err:
            return self.error(record, err)
        response_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        if body.get("stream") is not True:
            build = partial(
                answer_body,
                plan,
                chat=chat,
                response_id=response_id,
                created=created,
                model=model,
                prompt_tokens=prompt_tokens,
            )
            return await self.whole(request.receive, record, plan, model, build)
        options = body.get("stream_options")
        options = options if isinstance(options, dict) else {}
        include_usage = options.get("include_usage") is True
        # As in vLLM, continuous_usage_stats counts only together with include_usage.
        continuous = include_usage and options.get("continuous_usage_stats") is True
        frames = (ChatFrames if chat else CompletionFrames)(
            response_id, created, model, continuous_usage=prompt_tokens if continuous else None
        )

        async def produce(send: Send) -> None:
            await produce_stream(record, plan, frames, prompt_tokens, include_usage, send)

        return ASGIResponse(partial(self._stream, record, plan, model, produce))

    def check_context(self, body: dict[str, Any], prompt_tokens: int) -> None:
        """As vLLM: a prompt and cap longer than the context it reports is a 400 (CONTRACT.md
        ERR-5). The cap was checked by make_plan; the newer name wins, as there."""
        cap = body.get("max_completion_tokens") or body.get("max_tokens")
        if isinstance(cap, int) and prompt_tokens + cap > self.max_model_len:
            raise bad_request(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you "
                f"requested {prompt_tokens + cap} tokens ({prompt_tokens} in the messages, {cap} in "
                "the completion). Please reduce the length of the messages or completion.",
                "max_tokens",
            )

    async def _stall(self, receive: Receive) -> bool:
        return await run_unless_disconnected(asyncio.sleep(STALL_S), receive)

    async def _stream(
        self,
        record: RequestRecord,
        plan: Plan,
        model: str,
        produce: Callable[[Send], Coroutine[Any, Any, None]],
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
            try:
                finished = await run_unless_disconnected(produce(send), receive)
            except InjectedAbort:
                record.finish("failed")
                raise
        if not finished:
            record.finish("disconnected")
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _token_id(i: int) -> int:
    """The fake tokenizer's id of prompt token i: any stable number will do."""
    return 100 + i


def _bind(worker: FakeWorker, handler: Callable[[FakeWorker, Request], Awaitable[Response]]) -> Any:
    async def endpoint(request: Request) -> Response:
        return await handler(worker, request)

    return endpoint


def create_app(
    model_names: Sequence[str] = ("fake-model",), *, max_model_len: int = MAX_MODEL_LEN
) -> Starlette:
    """A fresh worker serving `model_names`; all its state lives on this app (`.state.worker`).

    `max_model_len` is what `/tokenize` and `/v1/models` report, and chat and completions refuse
    a prompt and cap longer than it, as vLLM does."""
    worker = FakeWorker(model_names, max_model_len)
    one = "/v1/responses/{response_id}"
    routes = [
        Route("/health", worker.health, methods=["GET"]),
        Route("/v1/models", worker.models, methods=["GET"]),
        Route("/metrics", worker.metrics, methods=["GET"]),
        Route("/fake/requests/{request_id}", worker.request_record, methods=["GET"]),
        Route("/v1/chat/completions", scripted(worker, "chat", worker.chat), methods=["POST"]),
        Route("/v1/completions", worker.completions, methods=["POST"]),
        Route("/v1/embeddings", worker.embeddings, methods=["POST"]),
        Route("/tokenize", worker.tokenize, methods=["POST"]),
        Route(
            "/v1/messages",
            scripted(worker, "messages", _bind(worker, messages.create_message)),
            methods=["POST"],
        ),
        Route("/v1/messages/count_tokens", _bind(worker, messages.count_tokens), methods=["POST"]),
        Route(
            "/v1/responses",
            scripted(worker, "responses", _bind(worker, responses.create_response)),
            methods=["POST"],
        ),
        Route(one, _bind(worker, stored.get_response), methods=["GET"]),
        Route(one, _bind(worker, stored.delete_response), methods=["DELETE"]),
        Route(f"{one}/cancel", _bind(worker, stored.cancel_response), methods=["POST"]),
        Route(f"{one}/input_items", _bind(worker, stored.list_input_items), methods=["GET"]),
    ]
    app = Starlette(routes=routes)
    app.state.worker = worker
    return app
