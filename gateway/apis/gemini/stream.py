"""A worker's chat stream, re-told as Gemini `GenerateContentResponse` chunks as it arrives.

    alt=sse   each chunk is `data: {json}` and a blank line (Google's framing, `\r\n`)
    no alt    one JSON array, written as it grows: `[{chunk}`, `,\r\n{chunk}`..., `]`

Text and reasoning (`thought` parts) go out the moment they arrive, one chunk per worker chunk.
A function call goes out whole (Gemini's `args` is an object, not fragments of one), with the
last chunk: that one carries every candidate's function calls, `finishReason` and the
`usageMetadata` of the worker's last cumulative report, the counts the request is metered with.
A failure after the stream began ends it with Google's error object in place of a chunk.

What is held until the end is bounded, whatever the worker sends: at most MAX_CANDIDATES
candidate indexes (what a request may ask for), MAX_CALLS tool calls a candidate and
MAX_HELD_CHARS characters of arguments in all. Past any, the stream ends with Google's error
object (the relay's, through StreamTooLarge).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.apis.gemini import answer
from gateway.apis.gemini.errors import error_body
from gateway.apis.gemini.generation import MAX_CANDIDATES
from gateway.errors import GatewayError
from gateway.proxy.dialect import StreamTooLarge

_SSE_END = b"\r\n\r\n"
MAX_CALLS = 128
_MAX_NAME = 256  # an id's or a name's characters kept (each is held until the end)
# A whole answer's tool calls in 4 MiB of arguments (at least: a character is a byte or more):
# four times the largest worker event relayed by default (SLUICEGATE_MAX_EVENT_BYTES).
MAX_HELD_CHARS = 4 * 1024 * 1024


class _Call:
    __slots__ = ("arguments", "call_id", "name")

    def __init__(self) -> None:
        self.call_id = ""
        self.name = ""
        self.arguments: list[str] = []  # fragments, joined once at the end


class _Candidate:
    __slots__ = ("calls", "finish")

    def __init__(self) -> None:
        self.calls: dict[int, _Call] = {}  # by the worker's tool-call index
        self.finish: str | None = None


class GeminiStream:
    __slots__ = (
        "_candidates",
        "_completion",
        "_held",
        "_include_thoughts",
        "_model_version",
        "_prompt",
        "_response_id",
        "_sse",
        "_started",
        "_thoughts",
    )

    def __init__(
        self, *, response_id: str, model_version: str, prompt_estimate: int, include_thoughts: bool, sse: bool
    ) -> None:
        self._response_id = response_id
        self._model_version = model_version
        self._include_thoughts = include_thoughts
        self._sse = sse
        self._prompt = prompt_estimate
        self._completion = 0
        self._thoughts = 0
        self._started = False
        self._candidates: dict[int, _Candidate] = {}
        self._held = 0  # characters of arguments held

    def event(self, chunk: dict[str, Any], data: bytes, raw: bytes) -> bytes:
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._note_usage(usage)
        choices = chunk.get("choices")
        candidates = []
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict):
                continue
            index = choice.get("index")
            index = index if type(index) is int else 0
            candidate = self._candidates.get(index)
            if candidate is None:
                if len(self._candidates) >= MAX_CANDIDATES:
                    raise StreamTooLarge
                candidate = self._candidates[index] = _Candidate()
            delta = choice.get("delta")
            parts = self._parts(delta, candidate) if isinstance(delta, dict) else []
            finish = choice.get("finish_reason")
            if isinstance(finish, str) and finish:
                candidate.finish = finish
            if parts:
                candidates.append({"content": {"role": "model", "parts": parts}, "index": index})
        if not candidates:
            return b""
        return self._frame({"candidates": candidates, **self._tail()})

    def done(self) -> bytes:
        candidates = []
        for index, candidate in sorted((self._candidates or {0: _Candidate()}).items()):
            parts = [
                answer.function_call(call.call_id, call.name, "".join(call.arguments))
                for _, call in sorted(candidate.calls.items())
            ]
            candidates.append(
                {
                    # No parts left to say: an empty model turn, as Google's last chunks have.
                    "content": {"role": "model", "parts": parts},
                    "finishReason": answer.finish_reason(candidate.finish),
                    "index": index,
                }
            )
        usage = answer.usage_metadata(self._prompt, self._completion, self._thoughts)
        last = self._frame({"candidates": candidates, "usageMetadata": usage, **self._tail()})
        return last if self._sse else last + b"]"

    def failure(self, error: GatewayError) -> bytes:
        body = error_body(error)
        if self._sse:
            return b"data: " + body + _SSE_END
        opening = b",\r\n" if self._started else b"["
        self._started = True
        return opening + body + b"]"

    def _frame(self, payload: dict[str, Any]) -> bytes:
        body = orjson.dumps(payload)
        if self._sse:
            return b"data: " + body + _SSE_END
        opening = b",\r\n" if self._started else b"["
        self._started = True
        return opening + body

    def _tail(self) -> dict[str, str]:
        return {"modelVersion": self._model_version, "responseId": self._response_id}

    def _parts(self, delta: dict[str, Any], candidate: _Candidate) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        for field in ("reasoning_content", "reasoning"):
            reasoning = delta.get(field)
            if isinstance(reasoning, str) and reasoning:
                if self._include_thoughts:
                    parts.append({"text": reasoning, "thought": True})
                break
        content = delta.get("content")
        if isinstance(content, str) and content:
            parts.append({"text": content})
        calls = delta.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            if isinstance(call, dict):
                self._tool_call(call, candidate)
        return parts

    def _tool_call(self, call: dict[str, Any], candidate: _Candidate) -> None:
        """Gathered until the end: fragments of arguments make no `args` object before then."""
        position = call.get("index", 0)
        position = position if type(position) is int else 0
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        held = candidate.calls.get(position)
        if held is None:
            if len(candidate.calls) >= MAX_CALLS:
                raise StreamTooLarge
            held = candidate.calls[position] = _Call()
        call_id, name, fragment = call.get("id"), function.get("name"), function.get("arguments")
        if isinstance(call_id, str) and call_id and not held.call_id:
            held.call_id = call_id[:_MAX_NAME]
        if isinstance(name, str) and name and not held.name:
            held.name = name[:_MAX_NAME]
        if isinstance(fragment, str) and fragment:
            self._held += len(fragment)
            if self._held > MAX_HELD_CHARS:
                raise StreamTooLarge
            held.arguments.append(fragment)

    def _note_usage(self, usage: dict[str, Any]) -> None:
        # Checked as the relay checks it (gateway.proxy.usage): a count that is no count is ignored.
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if type(prompt) is int and prompt >= 0:
            self._prompt = prompt
        if type(completion) is int and completion >= 0:
            self._completion = completion
            self._thoughts = answer.reasoning_tokens(usage, completion)
