"""Bytes of OpenAI responses, framed exactly as vLLM's OpenAI server frames them.

vLLM serialises stream chunks with pydantic's `model_dump_json(exclude_unset=True)`: compact JSON,
field order as declared on its models, and only the fields it set explicitly. orjson with dicts
built in that order yields the same bytes, so a client (or the gateway's SSE relay) cannot tell a
worker framing with this module from vLLM at the framing level.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import orjson

from workers.common.errors import error_envelope

SSE_DONE = b"data: [DONE]\n\n"
SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"

JSONObject = dict[str, Any]


def sse(payload: JSONObject) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def sse_error(message: str, err_type: str, code: int) -> bytes:
    # vLLM builds its mid-stream error event with `json.dumps` rather than pydantic, so this one
    # event has spaces after separators; stay byte-identical rather than tidy.
    return b"data: " + json.dumps(error_envelope(message, err_type, code)).encode() + b"\n\n"


def usage(prompt_tokens: int, completion_tokens: int, *, with_details: bool) -> JSONObject:
    body: JSONObject = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    if with_details:
        # Non-stream responses are dumped without exclude_none, so vLLM shows the null field.
        body["prompt_tokens_details"] = None
    return body


class _Frames:
    """Every chunk of one streamed response: the shared head (`id`, `object`, `created`, `model`),
    and the running usage when the stream asked for it on every chunk.

    Each chunk method takes `generated`, the completion tokens generated so far, those of the
    chunk included. It shows only when the frames were made with `continuous_usage` (the prompt's
    token count), as vLLM shows it for `stream_options.continuous_usage_stats`: a `usage` object
    after `choices` on every chunk with a choice, the role chunk's counting 0 generated tokens.
    """

    __slots__ = ("_head", "_prompt_tokens", "_token_prefix", "_token_suffix")

    _object: ClassVar[str] = ""
    _choice_end: ClassVar[bytes] = b""
    """What closes an unfinished token chunk's choice and the `choices` list."""

    def __init__(
        self,
        response_id: str,
        created: int,
        model: str,
        token_field: bytes,
        continuous_usage: int | None,
    ) -> None:
        self._head: JSONObject = {
            "id": response_id,
            "object": self._object,
            "created": created,
            "model": model,
        }
        self._prompt_tokens = continuous_usage
        # Token chunks are the hot path of every benchmark that uses this worker, so they are
        # spliced from a prebuilt prefix/suffix (test_fake_worker checks it against orjson).
        head = orjson.dumps(self._head)[:-1]
        self._token_prefix = b"data: " + head + b',"choices":[{"index":0,' + token_field
        self._token_suffix = self._choice_end + b"}\n\n"

    def _running_usage(self, prompt_tokens: int, generated: int) -> JSONObject:
        return usage(prompt_tokens, generated, with_details=False)

    def chunk(self, choice: JSONObject, *, generated: int) -> bytes:
        payload = {**self._head, "choices": [choice]}
        if self._prompt_tokens is not None:
            payload["usage"] = self._running_usage(self._prompt_tokens, generated)
        return sse(payload)

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        usage_body = usage(prompt_tokens, completion_tokens, with_details=False)
        return sse({**self._head, "choices": [], "usage": usage_body})

    def token(self, text: str, *, generated: int) -> bytes:
        if self._prompt_tokens is None:
            return self._token_prefix + orjson.dumps(text) + self._token_suffix
        running = orjson.dumps(self._running_usage(self._prompt_tokens, generated))
        return self._token_prefix + orjson.dumps(text) + self._choice_end + b',"usage":' + running + b"}\n\n"


class ChatFrames(_Frames):
    __slots__ = ()
    _object = "chat.completion.chunk"
    _choice_end = b'},"logprobs":null,"finish_reason":null}]'

    def __init__(
        self, response_id: str, created: int, model: str, *, continuous_usage: int | None = None
    ) -> None:
        super().__init__(response_id, created, model, b'"delta":{"content":', continuous_usage)

    def _running_usage(self, prompt_tokens: int, generated: int) -> JSONObject:
        # vLLM's chat chunks set completion_tokens_details explicitly (to null without a reasoning
        # parser), so exclude_unset keeps it; its completion chunks leave it unset.
        return {**usage(prompt_tokens, generated, with_details=False), "completion_tokens_details": None}

    def role(self) -> bytes:
        delta = {"role": "assistant", "content": ""}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        return self.chunk(choice, generated=0)

    def last_token(self, text: str, finish_reason: str, *, generated: int) -> bytes:
        return self.finish({"content": text}, finish_reason, generated=generated)

    def finish(self, delta: JSONObject, finish_reason: str, *, generated: int) -> bytes:
        return self.chunk(
            {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            },
            generated=generated,
        )

    def tool_call_start(self, call_id: str, name: str, *, generated: int) -> bytes:
        call = {
            "id": call_id,
            "type": "function",
            "index": 0,
            "function": {"name": name, "arguments": ""},
        }
        delta = {"tool_calls": [call]}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        return self.chunk(choice, generated=generated)

    def tool_call_arguments(self, fragment: str, finish_reason: str | None, *, generated: int) -> bytes:
        delta = {"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]}
        if finish_reason is not None:
            return self.finish(delta, finish_reason, generated=generated)
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        return self.chunk(choice, generated=generated)


class CompletionFrames(_Frames):
    __slots__ = ()
    _object = "text_completion"
    _choice_end = b',"logprobs":null,"finish_reason":null,"stop_reason":null}]'

    def __init__(
        self, response_id: str, created: int, model: str, *, continuous_usage: int | None = None
    ) -> None:
        super().__init__(response_id, created, model, b'"text":', continuous_usage)

    def last_token(self, text: str, finish_reason: str, *, generated: int) -> bytes:
        return self.chunk(
            {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            },
            generated=generated,
        )


def chat_completion(
    response_id: str,
    created: int,
    model: str,
    message: JSONObject,
    finish_reason: str,
    prompt_tokens: int,
    completion_tokens: int,
) -> bytes:
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": None,
    }
    return orjson.dumps(
        {
            "id": response_id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [choice],
            "usage": usage(prompt_tokens, completion_tokens, with_details=True),
        }
    )


def text_completion(
    response_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str,
    prompt_tokens: int,
    completion_tokens: int,
) -> bytes:
    choice = {
        "index": 0,
        "text": text,
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": None,
    }
    return orjson.dumps(
        {
            "id": response_id,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [choice],
            "usage": usage(prompt_tokens, completion_tokens, with_details=True),
        }
    )
