"""A worker's chat stream, re-told as Anthropic Messages events as each chunk arrives.

    message_start                       on the first chunk (usage: the prompt's count)
    per block, in order:
      content_block_start {index, content_block: text | thinking | tool_use}
      content_block_delta {index, delta: text_delta | thinking_delta | input_json_delta}
      content_block_stop
    (no content at all: one empty text block, started and stopped)
    message_delta {stop_reason, stop_sequence, usage}   once the worker said [DONE]
    message_stop
    error                               instead of the rest, when the stream fails

One block is open at a time: a delta of another kind closes it and opens the next. Reasoning is
a thinking block whether it came as `reasoning_content` (a worker with a reasoning parser) or as
`<think>…</think>` in the content (anthropic_think). Tool-call argument fragments are relayed as
`input_json_delta` the moment they arrive, never gathered. The usage in `message_delta` is the
worker's last cumulative report: the same counts the request is metered with.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.apis.anthropic.errors import error_body
from gateway.apis.anthropic.think import Phase, Piece, ThinkSplitter
from gateway.errors import GatewayError


def sse(kind: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def _delta_prefix(index: int, delta_type: str, field: str) -> bytes:
    """What `sse("content_block_delta", ...)` writes before the delta's string value: the hot path
    writes the prefix and `orjson.dumps(text)` instead of encoding two dicts (the same bytes)."""
    return (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
        + str(index).encode()
        + b',"delta":{"type":"'
        + delta_type.encode()
        + b'","'
        + field.encode()
        + b'":'
    )


_DELTA_END = b"}}\n\n"
_TEXT = Phase.TEXT


def stop_reason(
    finish_reason: str | None, matched: Any, stop_sequences: tuple[str, ...]
) -> tuple[str, str | None]:
    """Anthropic's stop_reason and stop_sequence for a chat finish_reason. `matched` is what vLLM
    writes in a choice's `stop_reason`: the stop string that ended the answer, if one did."""
    if finish_reason == "length":
        return "max_tokens", None
    if finish_reason == "tool_calls":
        return "tool_use", None
    if isinstance(matched, str) and matched in stop_sequences:
        return "stop_sequence", matched
    return "end_turn", None


class AnthropicStream:
    __slots__ = (
        "_block",
        "_delta_prefix",
        "_finish",
        "_input_tokens",
        "_matched",
        "_message_id",
        "_model",
        "_next_index",
        "_output_tokens",
        "_started",
        "_stop_sequences",
        "_think",
        "_tools",
    )

    def __init__(
        self, *, message_id: str, model: str, prompt_estimate: int, stop_sequences: tuple[str, ...]
    ) -> None:
        self._message_id = message_id
        self._model = model
        self._stop_sequences = stop_sequences
        self._input_tokens = prompt_estimate
        self._output_tokens = 0
        self._started = False
        self._block: tuple[str, int] | None = None  # (kind, index) of the open block
        self._delta_prefix = b""  # _delta_prefix of the open block, when it is text or thinking
        self._next_index = 0
        self._tools: dict[int, int] = {}  # the worker's tool-call index -> the block's index
        self._think = ThinkSplitter()
        self._finish: str | None = None
        self._matched: Any = None

    def event(self, chunk: dict[str, Any], data: bytes, raw: bytes) -> bytes:
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._note_usage(usage)
        out: list[bytes] = [] if self._started else [self._message_start()]
        choices = chunk.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            choice = choices[0]  # a Messages request asks for one answer
            delta = choice.get("delta")
            if isinstance(delta, dict):
                content = delta.get("content")
                block = self._block
                if (
                    isinstance(content, str)
                    and content
                    and block is not None
                    and block[0] == "text"
                    and self._think.phase is _TEXT
                    and "reasoning_content" not in delta
                    and "reasoning" not in delta
                    and "tool_calls" not in delta
                ):
                    # The hot path: one more piece of the answer into the open text block. What
                    # _delta writes then (the splitter passes text through once the answer began),
                    # with no splitter, block or dict on the way.
                    out.append(self._delta_prefix + orjson.dumps(content) + _DELTA_END)
                else:
                    self._delta(delta, out)
            finish = choice.get("finish_reason")
            if isinstance(finish, str) and finish:
                self._finish, self._matched = finish, choice.get("stop_reason")
        return out[0] if len(out) == 1 else b"".join(out)

    def done(self) -> bytes:
        out: list[bytes] = []
        if not self._started:
            out.append(self._message_start())
        self._pieces(self._think.flush(), out)
        if self._next_index == 0:
            # An answer of nothing still carries one (empty) text block, as a whole answer does.
            self._open("text", {"type": "text", "text": ""}, out)
        self._close(out)
        reason, sequence = stop_reason(self._finish, self._matched, self._stop_sequences)
        out.append(
            sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": reason, "stop_sequence": sequence},
                    "usage": {"input_tokens": self._input_tokens, "output_tokens": self._output_tokens},
                },
            )
        )
        out.append(sse("message_stop", {"type": "message_stop"}))
        return b"".join(out)

    def failure(self, error: GatewayError) -> bytes:
        return b"event: error\ndata: " + error_body(error) + b"\n\n"

    def _note_usage(self, usage: dict[str, Any]) -> None:
        # Checked as the relay checks it (gateway.proxy.usage): a count that is no count is ignored.
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if type(prompt) is int and prompt >= 0:
            self._input_tokens = prompt
        if type(completion) is int and completion >= 0:
            self._output_tokens = completion

    def _message_start(self) -> bytes:
        self._started = True
        message: dict[str, Any] = {
            "id": self._message_id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self._input_tokens, "output_tokens": 0},
        }
        return sse("message_start", {"type": "message_start", "message": message})

    def _delta(self, delta: dict[str, Any], out: list[bytes]) -> None:
        for field in ("reasoning_content", "reasoning"):
            reasoning = delta.get(field)
            if isinstance(reasoning, str) and reasoning:
                self._pieces([(True, reasoning)], out)
                break
        content = delta.get("content")
        if isinstance(content, str) and content:
            self._pieces(self._think.feed(content), out)
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                if isinstance(call, dict):
                    self._tool_call(call, out)

    def _pieces(self, pieces: list[Piece], out: list[bytes]) -> None:
        for thinking, text in pieces:
            block = self._block
            kind = "thinking" if thinking else "text"
            if block is None or block[0] != kind:
                if thinking:
                    # A chat worker signs nothing: the signature stays empty.
                    self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""}, out)
                else:
                    self._open("text", {"type": "text", "text": ""}, out)
            # sse("content_block_delta", {"type": "content_block_delta", "index": index,
            # "delta": {"type": "text_delta", "text": text}}) (or thinking_delta, "thinking"),
            # written from the open block's prefix.
            out.append(self._delta_prefix + orjson.dumps(text) + _DELTA_END)

    def _tool_call(self, call: dict[str, Any], out: list[bytes]) -> None:
        position = call.get("index", 0)
        position = position if type(position) is int else 0
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        index = self._tools.get(position)
        if index is None:
            # A tool call's first fragment names it: it starts a block of its own.
            call_id = call.get("id")
            name = function.get("name")
            block = {
                "type": "tool_use",
                "id": call_id
                if isinstance(call_id, str) and call_id
                else f"toolu_{self._message_id}_{position}",
                "name": name if isinstance(name, str) else "",
                "input": {},
            }
            self._close(out)
            index = self._open(f"tool_use:{position}", block, out)
            self._tools[position] = index
        fragment = function.get("arguments")
        if isinstance(fragment, str) and fragment and self._block == (f"tool_use:{position}", index):
            delta = {"type": "input_json_delta", "partial_json": fragment}
            out.append(
                sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            )

    def _open(self, kind: str, block: dict[str, Any], out: list[bytes]) -> int:
        """The open block's index when it is of `kind`; else the next block, opened."""
        if self._block is not None and self._block[0] == kind:
            return self._block[1]
        self._close(out)
        index = self._next_index
        self._next_index += 1
        self._block = (kind, index)
        if kind == "text":
            self._delta_prefix = _delta_prefix(index, "text_delta", "text")
        elif kind == "thinking":
            self._delta_prefix = _delta_prefix(index, "thinking_delta", "thinking")
        out.append(
            sse(
                "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
            )
        )
        return index

    def _close(self, out: list[bytes]) -> None:
        if self._block is None:
            return
        out.append(sse("content_block_stop", {"type": "content_block_stop", "index": self._block[1]}))
        self._block = None
