"""OpenAI chat completions, completions and embeddings: the workers' own wire format, so the
client's body reaches the worker nearly as sent (unknown fields pass through) and the answer
comes back nearly as the worker wrote it. What changes: `model` (the worker's name for it, and
back), and the usage reports the gateway asks for on a stream, which a client that did not ask
for them never sees.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import orjson
from starlette.responses import Response

from gateway.errors import GatewayError
from gateway.limits.admission import Admission, LimitKind
from gateway.limits.output import NO_OUTPUT, AskedOutput
from gateway.model_table import ModelConfig
from gateway.proxy import worker_protocols
from gateway.proxy.cache_salt import client_salt, salted
from gateway.proxy.translation import engine_fields
from gateway.proxy.translation.body import dumps, model_of, open_body
from gateway.proxy.translation.body import field_error as _field_error
from gateway.proxy.translation.bounds import BodyBounds, BodyLists, check_bounds
from gateway.proxy.usage import MAX_TOKENS
from gateway.proxy.worker_protocols import WorkerProtocol

DONE_EVENT = b"data: [DONE]\n\n"
# What the item bound counts (gateway.proxy.translation.bounds): chat's messages, embeddings'
# inputs, each message's content parts, the tools.
LISTS = BodyLists(items=("messages", "input"), parts=("content",), tools=("tools",))
BOUNDS = BodyBounds(lists=LISTS)
# Answers one request may ask for (`n`, `best_of`): OpenAI's own cap. Each is reserved in full.
MAX_CHOICES = 128
# Where a client may put its output cap; the first given is the one that counts.
_CAP_FIELDS = ("max_completion_tokens", "max_tokens")
COMPLETIONS_PATH = "/v1/completions"
# A completion without `max_tokens` generates 16 tokens, in OpenAI's API and in vLLM's.
COMPLETIONS_DEFAULT_MAX_TOKENS = 16


@dataclass(frozen=True, slots=True)
class OpenAICall:
    path: str
    payload: dict[str, Any]
    raw: bytes
    model: str
    stream: bool
    input_field: str
    wants_usage: bool  # the client asked for the final usage chunk
    wants_continuous_usage: bool  # ... and for usage on every chunk
    prompt_estimate: int  # ~4 characters a token
    is_embeddings: bool = False
    client_salt: str | None = None  # the client's own cache_salt, checked (gateway.proxy.cache_salt)
    # The fields the model's allow-list dropped (`held_to`): `payload` no longer has them.
    ignored: tuple[str, ...] = ()

    @property
    def worker_path(self) -> str:
        return self.path

    # Class attributes, not properties: read several times per request, each read of a property
    # a Python call.
    protocol: ClassVar[WorkerProtocol] = worker_protocols.CHAT
    continues: ClassVar[str | None] = None

    def held_to(self, model: ModelConfig) -> Self:
        """The body held to the model's allow-list and logprob cap
        (gateway.proxy.translation.engine_fields): unchanged when it names nothing else."""
        payload = self.payload
        if "logprobs" in payload or "top_logprobs" in payload or "prompt_logprobs" in payload:
            engine_fields.check_logprobs(payload, model.max_logprobs, self.path == COMPLETIONS_PATH)
        extra = payload.keys() - engine_fields.FIELDS[self.path]
        if extra:
            extra -= model.engine_fields
        if not extra:
            return self
        kept, dropped = engine_fields.held(payload, extra)
        return dataclasses.replace(self, payload=kept, ignored=dropped)

    @property
    def user(self) -> str | None:
        user = self.payload.get("user")
        return user if isinstance(user, str) else None

    def worker_body(
        self, wire_model: str, *, continuous_usage: bool, max_tokens: int | None, cache_salt: str | None
    ) -> bytes:
        """The worker's name for the model, the output cap admission reserved (in the field the
        client used, `max_tokens` if none), the gateway's `cache_salt` in place of the client's
        (embeddings get none), and on a stream usage always on (cumulative on every chunk where
        the worker supports it: exact metering when a client leaves mid-stream). Unchanged bytes
        when there is nothing to change."""
        caps: dict[str, int] = {}
        if max_tokens is not None:
            given = [name for name in _CAP_FIELDS if self.payload.get(name) is not None] or ["max_tokens"]
            caps = {name: max_tokens for name in given if self.payload.get(name) != max_tokens}
        salt = None if self.is_embeddings else cache_salt
        if (
            not self.stream
            and self.model == wire_model
            and not caps
            and self.client_salt is None
            and not self.ignored
        ):
            # The salt is URL-safe text, so it is appended to the client's bytes, not re-encoded.
            return self.raw if salt is None else salted(self.raw, salt)
        payload = {**self.payload, **caps}
        payload["model"] = wire_model
        payload.pop("cache_salt", None)
        if salt is not None:
            payload["cache_salt"] = salt
        if self.stream:
            options = dict(self.payload.get("stream_options") or {})
            options["include_usage"] = True
            if continuous_usage:
                options["continuous_usage_stats"] = True
            payload["stream_options"] = options
        return dumps(payload)

    def asked_output(self) -> AskedOutput:
        """The cap per answer the client set (`max_completion_tokens` before `max_tokens`), and
        the answers generated (`n` are returned, `best_of` generated; parse checked both)."""
        if self.is_embeddings:
            return NO_OUTPUT
        cap = next((self.payload[name] for name in _CAP_FIELDS if self.payload.get(name) is not None), None)
        if cap is None and self.path == COMPLETIONS_PATH:
            cap = COMPLETIONS_DEFAULT_MAX_TOKENS  # the API's own default, which engines apply too
        answers = max(self.payload.get("n") or 1, self.payload.get("best_of") or 1)
        return AskedOutput(cap if isinstance(cap, int) else None, answers)

    def estimated_prompt_tokens(self) -> int:
        """For reservations, and for usage a worker did not report."""
        return self.prompt_estimate


class OpenAIStream:
    """Passes the worker's chunks on, with the client's model name, minus the usage reports
    the gateway asked for and the client did not."""

    __slots__ = ("_call", "_name", "_rewrite")

    def __init__(self, call: OpenAICall, answer_name: str) -> None:
        self._call = call
        self._name = answer_name
        self._rewrite = ModelRewrite(answer_name)

    def event(self, chunk: dict[str, Any], data: bytes, raw: bytes) -> bytes:
        call = self._call
        changed = False
        if "usage" in chunk:
            if chunk.get("choices") == []:
                if not call.wants_usage:
                    return b""  # the final usage chunk the gateway asked for, not the client
            elif not call.wants_continuous_usage:
                # Cumulative usage on a content chunk: the gateway's alone. Workers write it last
                # (vLLM, Reframr, the fake), so it is cut off the bytes without re-encoding.
                usage = chunk.pop("usage")
                changed = True
                tail = b',"usage":' + orjson.dumps(usage) + b"}"
                if data.endswith(tail):
                    data = data[: -len(tail)] + b"}"
                else:
                    # Nested deeper than orjson writes: relayed as the worker wrote it.
                    with contextlib.suppress(orjson.JSONEncodeError):
                        data = orjson.dumps(chunk)
        model = chunk.get("model")
        # The worker's name is the client's in most streams: no call per chunk to find that out.
        renamed = data if model == self._name else self._rewrite.apply(data, model)
        if renamed is data and not changed:
            return raw  # as the worker sent it: no copy
        return b"data: " + renamed + b"\n\n"

    def done(self) -> bytes:
        return DONE_EVENT

    def failure(self, error: GatewayError) -> bytes:
        return error.sse_event() + DONE_EVENT


class ModelRewrite:
    """Puts the client's model name where the worker wrote its own, without re-encoding."""

    __slots__ = ("_encoded", "_name")

    def __init__(self, client_name: str) -> None:
        self._name = client_name
        self._encoded: bytes | None = None  # made when first needed: most answers keep the name

    def apply(self, data: bytes, worker_name: Any) -> bytes:
        if not isinstance(worker_name, str) or worker_name == self._name:
            return data
        encoded = self._encoded
        if encoded is None:
            # Not orjson.dumps: its result keeps a 4 KiB buffer however short the name, and a
            # rewrite lives as long as its stream (4 KiB of every open stream, bench/streams_bench.py).
            encoded = self._encoded = json.dumps(self._name, ensure_ascii=False).encode()
        up = orjson.dumps(worker_name)
        for needle in (b'"model":' + up, b'"model": ' + up):
            if needle in data:
                return data.replace(needle, b'"model":' + encoded)
        return data


@dataclass(frozen=True, slots=True)
class OpenAIDialect:
    name: str
    path: str
    input_field: str
    can_stream: bool
    keepalive: bytes | None = None  # OpenAI's streams have no keep-alive event

    def parse(
        self, raw: bytes, native_models: Collection[str] = (), bounds: BodyBounds = BOUNDS
    ) -> OpenAICall:
        """`native_models`: no model serves these APIs other than by the chat contract."""
        payload = open_body(raw)
        check_bounds(payload, bounds)
        model = model_of(payload)
        if self.input_field not in payload:
            raise _field_error(self.input_field, "is required")
        self._check_input(payload[self.input_field])
        stream = payload.get("stream", False)
        if not isinstance(stream, bool) and stream is not None:
            raise _field_error("stream", "must be a boolean")
        stream = bool(stream)
        if stream and not self.can_stream:
            raise _field_error("stream", f"is not supported on {self.path}")
        options = payload.get("stream_options")
        if options is not None and not isinstance(options, dict):
            raise _field_error("stream_options", "must be an object")
        for name in ("max_tokens", "max_completion_tokens"):
            value = payload.get(name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS
            ):
                # 0 as on every other API: vLLM refuses it, and it would reserve and generate nothing.
                raise _field_error(name, f"must be an integer from 1 to {MAX_TOKENS}")
        for name in ("n", "best_of"):
            value = payload.get(name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CHOICES
            ):
                raise _field_error(name, f"must be an integer from 1 to {MAX_CHOICES}")
        return OpenAICall(
            path=self.path,
            payload=payload,
            raw=raw,
            model=model,
            stream=stream,
            input_field=self.input_field,
            wants_usage=bool(options and options.get("include_usage") is True),
            wants_continuous_usage=bool(options and options.get("continuous_usage_stats") is True),
            # The tool schemas are prompt too (an agent's can outweigh its messages).
            prompt_estimate=_estimate(payload[self.input_field]) + _estimate(payload.get("tools")),
            is_embeddings=not self.can_stream,
            client_salt=client_salt(payload),
        )

    def _check_input(self, value: Any) -> None:
        if self.input_field == "messages":
            if not isinstance(value, list) or not value:
                raise _field_error("messages", "must be a non-empty list of messages")
            for i, message in enumerate(value):
                if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                    raise _field_error(f"messages[{i}]", "must be an object with a string 'role'")
        elif not isinstance(value, str | list) or value == []:
            raise _field_error(self.input_field, "must be a string or a non-empty list")

    def stream(self, call: OpenAICall, answer_name: str) -> OpenAIStream:
        return OpenAIStream(call, answer_name)

    def whole(self, call: OpenAICall, answer: dict[str, Any], body: bytes, answer_name: str) -> bytes:
        return ModelRewrite(answer_name).apply(body, answer.get("model"))

    def estimated_completion_tokens(self, answer: dict[str, Any]) -> int:
        chars = 0
        choices = answer.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict):
                continue
            message = choice.get("message")
            text = message.get("content") if isinstance(message, dict) else choice.get("text")
            if isinstance(text, str):
                chars += len(text)
        return math.ceil(chars / 4)

    def error_response(self, error: GatewayError) -> Response:
        return error.response()

    def limit_headers(self, admission: Admission) -> dict[str, str]:
        """OpenAI's x-ratelimit-* headers, each from the tightest limit of its kind."""
        headers: dict[str, str] = {}
        for kind, suffix in ((LimitKind.REQUESTS, "requests"), (LimitKind.TOKENS, "tokens")):
            tightest = admission.tightest(kind)
            if tightest is None:
                continue
            headers[f"x-ratelimit-limit-{suffix}"] = str(tightest.limit.amount)
            headers[f"x-ratelimit-remaining-{suffix}"] = str(max(tightest.remaining, 0))
            headers[f"x-ratelimit-reset-{suffix}"] = reset_duration(tightest.reset_after_s)
        return headers


def reset_duration(seconds: float) -> str:
    """OpenAI writes reset times as durations such as '1s', '6m0s' or '20ms'."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, secs = divmod(math.ceil(seconds), 60)
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


CHAT = OpenAIDialect("chat", "/v1/chat/completions", "messages", can_stream=True)
COMPLETIONS = OpenAIDialect("completions", COMPLETIONS_PATH, "prompt", can_stream=True)
EMBEDDINGS = OpenAIDialect("embeddings", "/v1/embeddings", "input", can_stream=False)


def _estimate(text: Any) -> int:
    return max(1, len(dumps(text)) // 4) if text else 0
