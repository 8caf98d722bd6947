"""Anthropic Messages and OpenAI Responses forwarded as they are, to workers that serve those APIs
themselves (a model with `protocols: {messages: native}` or `{responses: native}`; vLLM 0.32 serves
both).

The client's body goes to the worker unchanged but for `model` (the worker's name for it); the
worker's answer and events come back unchanged but for `model` (the client's name), and its
errors in the client API's envelope with that API's types (vLLM's `BadRequestError` becomes
`invalid_request_error`). Usage is read from the API's own events (gateway.proxy.worker_protocols).
What the gateway checks before forwarding is what its limits need: the model, the stream flag and
the output cap; the worker checks the rest, and its refusal reaches the client as a 4xx.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Self

import orjson

from gateway.errors import GatewayError
from gateway.limits.output import AskedOutput
from gateway.model_table import ModelConfig
from gateway.proxy import worker_protocols
from gateway.proxy.cache_salt import client_salt
from gateway.proxy.engine_ids import without_engine_ids
from gateway.proxy.translation import engine_fields
from gateway.proxy.translation.body import field_error as _field_error
from gateway.proxy.translation.body import open_body
from gateway.proxy.translation.tool_names import ToolNames
from gateway.proxy.usage import MAX_TOKENS
from gateway.proxy.worker_protocols import WorkerProtocol
from gateway.routing.stored_responses import RESPONSE_ID_RE

MESSAGES_PATH = "/v1/messages"
RESPONSES_PATH = "/v1/responses"
# Values that carry no prompt text (base64 images and files, image URLs): left out of the estimate.
_NOT_TEXT = frozenset({"data", "image_url", "url", "file_data", "file_id"})


def text_chars(value: Any) -> int:
    """Characters of prompt text in a request body: every string but images and files."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(text_chars(v) for v in value)
    if isinstance(value, dict):
        return sum(text_chars(v) for k, v in value.items() if k not in _NOT_TEXT)
    return 0


@dataclass(frozen=True, slots=True)
class NativeCall:
    """One request for a worker that serves the client's API itself."""

    body: dict[str, Any]
    model: str
    stream: bool
    user: str | None
    worker_path: str
    protocol: WorkerProtocol
    max_tokens: int | None
    prompt_estimate: int
    continues: str | None = None  # previous_response_id: the worker that holds it must answer
    # Set by a model's `native_normalise` (gateway.proxy.translation.model_rules): what was dropped,
    # and the flat names of namespaced tools, named back in answers and events.
    ignored: tuple[str, ...] = ()
    names: ToolNames | None = None
    client_salt: str | None = None  # the client's own cache_salt, checked (gateway.proxy.cache_salt)

    @property
    def cap_field(self) -> str:
        """The API's output cap: Messages' `max_tokens`, Responses' `max_output_tokens`."""
        return "max_output_tokens" if self.worker_path == RESPONSES_PATH else "max_tokens"

    def asked_output(self) -> AskedOutput:
        return AskedOutput(self.max_tokens)

    def held_to(self, model: ModelConfig) -> Self:
        """Forwarded as sent (the worker's own API checks its fields), but for the logprob counts,
        capped as an OpenAI body's are (Responses' `top_logprobs`; vLLM's `prompt_logprobs`)."""
        body = self.body
        if "top_logprobs" in body or "prompt_logprobs" in body:
            engine_fields.check_logprobs(body, model.max_logprobs, counted_logprobs=False)
        return self

    def estimated_prompt_tokens(self) -> int:
        return self.prompt_estimate

    def worker_body(
        self, wire_model: str, *, continuous_usage: bool, max_tokens: int | None, cache_salt: str | None
    ) -> bytes:
        """The body as sent but for the model, the output cap admission reserved (in the API's
        own field) and the gateway's `cache_salt` in place of the client's. Re-encoded from what
        orjson parsed, so it can always be written again."""
        caps: dict[str, int] = {} if max_tokens is None else {self.cap_field: max_tokens}
        body = {**without_engine_ids(self.body), "model": wire_model, **caps}
        body.pop("cache_salt", None)
        if cache_salt is not None:
            body["cache_salt"] = cache_salt
        return orjson.dumps(body)


def _common(payload: dict[str, Any], cap_field: str) -> tuple[str, bool, int | None]:
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise _field_error("model", "is required and must be a non-empty string")
    stream = payload.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _field_error("stream", "must be a boolean")
    cap = payload.get(cap_field)
    if cap is not None and (type(cap) is not int or not 1 <= cap <= MAX_TOKENS):
        raise _field_error(cap_field, f"must be an integer from 1 to {MAX_TOKENS}")
    return model, bool(stream), cap


def _estimate(payload: dict[str, Any]) -> int:
    return max(1, math.ceil(text_chars(payload) / 4))


def messages_call(payload: dict[str, Any]) -> NativeCall:
    model, stream, cap = _common(payload, "max_tokens")
    if cap is None:
        raise _field_error("max_tokens", "is required")
    metadata = payload.get("metadata")
    user = metadata.get("user_id") if isinstance(metadata, dict) else None
    return NativeCall(
        body=payload,
        model=model,
        stream=stream,
        user=user if isinstance(user, str) and user else None,
        worker_path=MESSAGES_PATH,
        protocol=worker_protocols.MESSAGES,
        max_tokens=cap,
        prompt_estimate=_estimate(payload),
        client_salt=client_salt(payload),
    )


def responses_call(payload: dict[str, Any]) -> NativeCall:
    model, stream, cap = _common(payload, "max_output_tokens")
    if payload.get("background") is not None and payload.get("background") is not False:
        # Generated after the answer, collected later by GET: nothing the gateway could meter
        # or hold a concurrency slot for while the tokens are made.
        raise _field_error(
            "background",
            "is not served through this gateway: a response generated in the background could not "
            "be metered or held to the key's limits; stream it instead",
        )
    previous = payload.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not RESPONSE_ID_RE.fullmatch(previous)):
        raise _field_error("previous_response_id", "must be a response id")
    user = payload.get("user")
    return NativeCall(
        body=payload,
        model=model,
        stream=stream,
        user=user if isinstance(user, str) and user else None,
        worker_path=RESPONSES_PATH,
        protocol=worker_protocols.RESPONSES,
        max_tokens=cap,
        prompt_estimate=_estimate(payload),
        continues=previous,
        client_salt=client_salt(payload),
    )


def for_native(raw: bytes, native_models: Collection[str]) -> dict[str, Any] | None:
    """The client's body, parsed, when it names a model whose workers serve its API natively;
    None when it is to be translated. The model is looked at first only if some model is native."""
    if not native_models:
        return None
    payload = peek(raw)
    return payload if payload.get("model") in native_models else None


def peek(raw: bytes) -> dict[str, Any]:
    return open_body(raw)


def named(answer: dict[str, Any], answer_name: str) -> dict[str, Any]:
    """The worker's object with the client's name for the model, and without the salt the
    gateway set, should the worker echo its request (a salt the client could replay elsewhere)."""
    if "model" in answer:
        answer["model"] = answer_name
    answer.pop("cache_salt", None)
    return answer


def sse(kind: bytes, data: dict[str, Any]) -> bytes:
    return b"event: " + kind + b"\ndata: " + orjson.dumps(data) + b"\n\n"


# SSE fields that steer the client's own connection: `id:` becomes its Last-Event-ID (sent back
# on a reconnect, a worker's id the gateway knows nothing of) and `retry:` its reconnection delay.
# Neither is the worker's to set for a client of the gateway; the translated path writes neither.
_STEERING = (b"id:", b"retry:")


def relayed(raw: bytes) -> bytes:
    """A worker's event as the client gets it: its `event:` and `data:` lines only. Line starts
    are looked for, so a `data:` line's JSON (one line) cannot match."""
    if not raw.startswith(_STEERING) and raw.find(b"\nid:") < 0 and raw.find(b"\nretry:") < 0:
        return raw
    kept = [line for line in raw[:-2].split(b"\n") if line.startswith((b"event:", b"data:"))]
    return b"\n".join(kept) + b"\n\n" if kept else b""


class MessagesPassThrough:
    """The worker's Messages events, as they are but for the model's name in message_start."""

    __slots__ = ("_answer_name", "_failure")

    def __init__(self, answer_name: str, failure: Any) -> None:
        self._answer_name = answer_name
        self._failure = failure  # (GatewayError) -> bytes: the dialect's error event

    def event(self, chunk: dict[str, Any], data: bytes, raw: bytes) -> bytes:
        if chunk.get("type") == "message_start" and isinstance(chunk.get("message"), dict):
            named(chunk["message"], self._answer_name)
            return sse(b"message_start", chunk)
        return relayed(raw)

    def done(self) -> bytes:
        return b""  # Messages streams end with message_stop, already relayed

    def failure(self, error: GatewayError) -> bytes:
        result: bytes = self._failure(error)
        return result


class ResponsesPassThrough:
    """The worker's Responses events, as they are but for the model's name in each `response`;
    a failure is a `response.failed` event that continues the worker's sequence numbers."""

    __slots__ = ("_answer_name", "_id", "_names", "_next_seq")

    def __init__(self, answer_name: str, names: ToolNames | None = None) -> None:
        self._answer_name = answer_name
        self._id: str | None = None
        self._next_seq = 0
        self._names = names if names is not None and names.back else None

    def event(self, chunk: dict[str, Any], data: bytes, raw: bytes) -> bytes:
        seq = chunk.get("sequence_number")
        if type(seq) is int:
            self._next_seq = seq + 1
        renamed = self._names is not None and self._names.event(chunk)
        kind = chunk.get("type")
        response = chunk.get("response")
        if not isinstance(response, dict):
            return (
                sse(kind.encode() if isinstance(kind, str) else b"message", chunk)
                if renamed
                else relayed(raw)
            )
        self._id = worker_protocols.responses_id(response) or self._id
        named(response, self._answer_name)
        return sse(kind.encode() if isinstance(kind, str) else b"message", chunk)

    def done(self) -> bytes:
        return b""

    def failure(self, error: GatewayError) -> bytes:
        failed: dict[str, Any] = {
            "id": self._id or "resp_" + "0" * 32,
            "object": "response",
            "status": "failed",
            "model": self._answer_name,
            "error": {"code": "server_error", "message": error.message},
            "output": [],
            "usage": None,
        }
        event = {"type": "response.failed", "sequence_number": self._next_seq, "response": failed}
        return sse(b"response.failed", event)
