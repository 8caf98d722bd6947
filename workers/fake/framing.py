"""Bytes of OpenAI responses, framed exactly as vLLM's OpenAI server frames them.

vLLM serialises stream chunks with pydantic's `model_dump_json(exclude_unset=True)`: compact JSON,
field order as declared on its models, and only the fields it set explicitly. orjson with dicts
built in that order yields the same bytes, so a client (or the gateway's SSE relay) cannot tell this
worker from vLLM at the framing level.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import orjson

SSE_DONE = b"data: [DONE]\n\n"
SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"

JSONObject = dict[str, Any]


def sse(payload: JSONObject) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def error_envelope(message: str, err_type: str, code: int, param: str | None = None) -> JSONObject:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


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
    """Shared head (`id`, `object`, `created`, `model`) of every chunk of one response."""

    __slots__ = ("_head", "_token_prefix", "_token_suffix")

    _object: ClassVar[str] = ""

    def __init__(self, response_id: str, created: int, model: str, token_field: bytes) -> None:
        self._head: JSONObject = {
            "id": response_id,
            "object": self._object,
            "created": created,
            "model": model,
        }
        # Token chunks are the hot path of every benchmark that uses this worker, so they are
        # spliced from a prebuilt prefix/suffix (test_fake_worker checks it against orjson).
        head = orjson.dumps(self._head)[:-1]
        self._token_prefix = b"data: " + head + b',"choices":[{"index":0,' + token_field
        self._token_suffix = self._suffix()

    def _suffix(self) -> bytes:
        raise NotImplementedError

    def chunk(self, choice: JSONObject) -> bytes:
        return sse({**self._head, "choices": [choice]})

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        usage_body = usage(prompt_tokens, completion_tokens, with_details=False)
        return sse({**self._head, "choices": [], "usage": usage_body})

    def token(self, text: str) -> bytes:
        return self._token_prefix + orjson.dumps(text) + self._token_suffix


class ChatFrames(_Frames):
    __slots__ = ()
    _object = "chat.completion.chunk"

    def __init__(self, response_id: str, created: int, model: str) -> None:
        super().__init__(response_id, created, model, b'"delta":{"content":')

    def _suffix(self) -> bytes:
        return b'},"logprobs":null,"finish_reason":null}]}\n\n'

    def role(self) -> bytes:
        delta = {"role": "assistant", "content": ""}
        return self.chunk({"index": 0, "delta": delta, "logprobs": None, "finish_reason": None})

    def last_token(self, text: str, finish_reason: str) -> bytes:
        return self.finish({"content": text}, finish_reason)

    def finish(self, delta: JSONObject, finish_reason: str) -> bytes:
        return self.chunk(
            {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
        )

    def tool_call_start(self, call_id: str, name: str) -> bytes:
        call = {
            "id": call_id,
            "type": "function",
            "index": 0,
            "function": {"name": name, "arguments": ""},
        }
        delta = {"tool_calls": [call]}
        return self.chunk({"index": 0, "delta": delta, "logprobs": None, "finish_reason": None})

    def tool_call_arguments(self, fragment: str, finish_reason: str | None) -> bytes:
        delta = {"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]}
        if finish_reason is not None:
            return self.finish(delta, finish_reason)
        return self.chunk({"index": 0, "delta": delta, "logprobs": None, "finish_reason": None})


class CompletionFrames(_Frames):
    __slots__ = ()
    _object = "text_completion"

    def __init__(self, response_id: str, created: int, model: str) -> None:
        super().__init__(response_id, created, model, b'"text":')

    def _suffix(self) -> bytes:
        return b',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'

    def last_token(self, text: str, finish_reason: str) -> bytes:
        return self.chunk(
            {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
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
