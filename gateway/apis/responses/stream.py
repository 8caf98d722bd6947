"""A worker's chat stream as Responses events, each `event: <type>` + `data: <json>` with a
`sequence_number` counting from 0:

    response.created, response.in_progress                   on the first worker chunk
    per output item, in the order the worker starts them:
      response.output_item.added
      message:       response.content_part.added, response.output_text.delta...,
                     response.output_text.done, response.content_part.done
      reasoning:     the same with reasoning_text (response.reasoning_text.delta / .done)
      function_call: response.function_call_arguments.delta... / .done
      response.output_item.done
    response.completed, or response.incomplete (the worker hit max_output_tokens)
        (an answer with neither text nor call still gets one, empty, message item)
    response.failed                                          a failure after the stream began

Every delta is relayed the moment its worker chunk arrives; nothing is held back for the end.
Text and reasoning items close when the worker moves on to something else; function calls stay
open until the finish, since a worker may interleave several calls' argument fragments (by their
tool index). A call of a flattened namespace tool is told by its own name and `namespace`
(gateway.proxy.translation.tool_names), in its items and in function_call_arguments.done.
Usage in the last event is the report the settlement meters: the worker's final one, else the last
cumulative one, else the gateway's estimate (gateway.proxy.settlement).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.apis.responses import call as shape
from gateway.apis.responses.call import ResponsesCall
from gateway.errors import GatewayError
from gateway.proxy.dialect import StreamTooLarge
from gateway.proxy.translation.tool_names import ToolNames
from gateway.proxy.usage import Usage


def _event_head(kind: str) -> bytes:
    """What `ResponsesStream._emit(kind, ...)` writes before the sequence number."""
    return b"event: " + kind.encode() + b'\ndata: {"type":"' + kind.encode() + b'","sequence_number":'


# What one stream may hold for its .done events and final response: far past any real answer
# (its tokens are capped), reached only by a worker that ignores its cap.
MAX_HELD_CHARS = 32 * 1024 * 1024
MAX_ITEMS = 4096
_TEXT_DELTA = _event_head("response.output_text.delta")
_TEXT_DELTA_END = b',"logprobs":[]}\n\n'
_REASONING_DELTA = _event_head("response.reasoning_text.delta")


@dataclass(slots=True)
class _Item:
    """One output item being streamed."""

    kind: str  # "message", "reasoning" or "function_call"
    index: int  # its output_index
    item_id: str
    text: list[str] = field(default_factory=list)  # text, reasoning or argument fragments
    call_id: str = ""
    name: str = ""  # the worker's name for a function (a flat one for a namespaced tool)
    names: ToolNames | None = None
    done: dict[str, Any] | None = None  # the finished item, once closed
    # A text or reasoning item's delta event as written between its sequence number and its
    # delta's string (see ResponsesStream._text); b"" until the first delta.
    delta_middle: bytes = b""

    def shaped(self, status: str) -> dict[str, Any]:
        text = "".join(self.text)
        if self.kind == "message":
            return shape.message_item(self.item_id, text, status)
        if self.kind == "reasoning":
            return shape.reasoning_item(self.item_id, text, status)
        call_status = "completed" if status != "in_progress" else status
        return shape.function_call_item(self.item_id, self.call_id, self.name, text, call_status, self.names)


class ResponsesStream:
    __slots__ = (
        "_call",
        "_calls",
        "_final",
        "_finish",
        "_generated",
        "_held",
        "_items",
        "_last",
        "_open",
        "_report",
        "_response",
        "_seq",
    )

    def __init__(self, call: ResponsesCall, answer_name: str) -> None:
        self._call = call
        self._response = call.skeleton(answer_name, shape.new_id("resp"), shape.now())
        self._seq = 0
        self._items: list[_Item] = []
        self._held = 0  # characters of text and arguments kept for the .done events and the end
        self._open: _Item | None = None  # the text or reasoning item being written
        self._calls: dict[int, _Item] = {}  # open function calls by the worker's tool index
        self._finish: str | None = None
        self._final: Usage | None = None  # the worker's final usage report
        self._last: Usage | None = None  # its last cumulative one
        self._report: Any = None  # the report behind whichever is told (for its details)
        self._generated = 0  # chunks that carried output: the settlement's estimate without usage

    # --- the ClientStream protocol -------------------------------------------------------------

    def event(self, chunk: dict[str, Any], data: bytes, raw: bytes) -> bytes:
        out: list[bytes] = [] if self._seq else self._begin()
        if chunk.get("usage") is not None:
            self._note_usage(chunk)
        choices = chunk.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if isinstance(choice, dict):
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._delta(delta, out)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                self._finish = reason
                self._close_all(out)
        return out[0] if len(out) == 1 else b"".join(out)

    def done(self) -> bytes:
        out: list[bytes] = [] if self._seq else self._begin()
        if not self._items:
            # Neither text nor a call: the client still gets the one message item it expects.
            self._open = self._open_item("message", "msg", out)
            where = self._where(self._open)
            out.append(self._emit("response.content_part.added", **where, part=shape.text_part("")))
        self._close_all(out)
        status, incomplete = shape.finish_status(self._finish)
        self._response.update(
            status=status, incomplete_details=incomplete, output=self._output(), usage=self._usage()
        )
        out.append(self._emit(f"response.{status}", response=self._response))
        return b"".join(out)

    def failure(self, error: GatewayError) -> bytes:
        out: list[bytes] = [] if self._seq else self._begin()
        self._response.update(
            status="failed",
            error={"code": "server_error", "message": error.message},
            output=self._output(),
            usage=self._usage(),
        )
        out.append(self._emit("response.failed", response=self._response))
        return b"".join(out)

    # --- events ------------------------------------------------------------------------------------

    def _emit(self, kind: str, **fields: Any) -> bytes:
        data = orjson.dumps({"type": kind, "sequence_number": self._seq, **fields})
        self._seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"

    def _begin(self) -> list[bytes]:
        return [
            self._emit("response.created", response=self._response),
            self._emit("response.in_progress", response=self._response),
        ]

    def _delta(self, delta: dict[str, Any], out: list[bytes]) -> None:
        content = delta.get("content")
        if content or delta.get("tool_calls") or delta.get("reasoning_content"):
            self._generated += 1  # counted as the relay counts tokens_relayed
        if "reasoning_content" in delta or "reasoning" in delta:
            for name in ("reasoning_content", "reasoning"):
                reasoning = delta.get(name)
                if isinstance(reasoning, str) and reasoning:
                    self._text("reasoning", reasoning, out)
                    break
        if isinstance(content, str) and content:
            self._text("message", content, out)
        if "tool_calls" in delta:
            calls = delta["tool_calls"]
            for call in calls if isinstance(calls, list) else ():
                if isinstance(call, dict):
                    self._tool_call(call, out)

    def _hold(self, text: str) -> None:
        """Everything streamed is kept until the end (the .done events and the final response
        repeat it): a worker that never stops must not grow the gateway without bound."""
        self._held += len(text)
        if self._held > MAX_HELD_CHARS:
            raise StreamTooLarge

    def _open_item(
        self, kind: str, prefix: str, out: list[bytes], call_id: str = "", name: str = ""
    ) -> _Item:
        if len(self._items) >= MAX_ITEMS:
            raise StreamTooLarge
        item = _Item(
            kind, len(self._items), shape.new_id(prefix), call_id=call_id, name=name, names=self._call.names
        )
        self._items.append(item)
        out.append(
            self._emit("response.output_item.added", output_index=item.index, item=item.shaped("in_progress"))
        )
        return item

    def _text(self, kind: str, text: str, out: list[bytes]) -> None:
        item = self._open
        if item is None or item.kind != kind:
            self._close_text(out)
            item = self._open = self._open_item(kind, "msg" if kind == "message" else "rs", out)
            part = shape.text_part("") if kind == "message" else shape.reasoning_part("")
            out.append(self._emit("response.content_part.added", **self._where(item), part=part))
        self._hold(text)
        item.text.append(text)
        # self._emit("response.output_text.delta", **self._where(item), delta=text, logprobs=[]), or
        # ("response.reasoning_text.delta", **self._where(item), delta=text): the same bytes, from
        # the parts that stay the same over the item's deltas.
        middle = item.delta_middle
        if not middle:
            where = orjson.dumps(self._where(item))  # {"item_id":…,"output_index":…,"content_index":0}
            middle = item.delta_middle = b"," + where[1:-1] + b',"delta":'
        encoded = orjson.dumps(text)
        seq = self._seq
        self._seq = seq + 1
        if kind == "message":
            out.append(_TEXT_DELTA + str(seq).encode() + middle + encoded + _TEXT_DELTA_END)
        else:
            out.append(_REASONING_DELTA + str(seq).encode() + middle + encoded + b"}\n\n")

    def _tool_call(self, call: dict[str, Any], out: list[bytes]) -> None:
        index = call.get("index", 0)
        index = index if type(index) is int else 0
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        item = self._calls.get(index)
        if item is None or (isinstance(call.get("id"), str) and call["id"] and call["id"] != item.call_id):
            # A new call (a known index with a new id is one too: the worker reuses indexes).
            self._close_text(out)
            if item is not None:
                self._close(item, out)
            call_id = call.get("id")
            name = function.get("name")
            item = self._open_item(
                "function_call",
                "fc",
                out,
                call_id=call_id if isinstance(call_id, str) and call_id else shape.new_id("call"),
                name=name if isinstance(name, str) else "",
            )
            self._calls[index] = item
        elif isinstance(function.get("name"), str) and function["name"] and not item.name:
            item.name = function["name"]  # a worker that names the call after its first chunk
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            self._hold(arguments)
            item.text.append(arguments)
            out.append(
                self._emit(
                    "response.function_call_arguments.delta",
                    item_id=item.item_id,
                    output_index=item.index,
                    delta=arguments,
                )
            )

    def _where(self, item: _Item) -> dict[str, Any]:
        return {"item_id": item.item_id, "output_index": item.index, "content_index": 0}

    def _close_text(self, out: list[bytes]) -> None:
        if self._open is not None:
            self._close(self._open, out)
            self._open = None

    def _close_all(self, out: list[bytes]) -> None:
        self._close_text(out)
        for item in self._calls.values():
            self._close(item, out)
        self._calls.clear()

    def _close(self, item: _Item, out: list[bytes]) -> None:
        if item.done is not None:
            return
        status, _ = shape.finish_status(self._finish)
        text = "".join(item.text)
        if item.kind == "function_call":
            out.append(
                self._emit(
                    "response.function_call_arguments.done",
                    item_id=item.item_id,
                    output_index=item.index,
                    name=item.names.original(item.name)[0] if item.names else item.name,
                    arguments=text,
                )
            )
        else:
            where = self._where(item)
            if item.kind == "message":
                out.append(self._emit("response.output_text.done", **where, text=text, logprobs=[]))
                part = shape.text_part(text)
            else:
                out.append(self._emit("response.reasoning_text.done", **where, text=text))
                part = shape.reasoning_part(text)
            out.append(self._emit("response.content_part.done", **where, part=part))
        item.done = item.shaped(status)
        out.append(self._emit("response.output_item.done", output_index=item.index, item=item.done))

    # --- the answer --------------------------------------------------------------------------------

    def _output(self) -> list[dict[str, Any]]:
        """Finished items as they were closed; unfinished ones (a failure) as far as they got."""
        return [item.done or item.shaped("incomplete") for item in self._items]

    def _note_usage(self, chunk: dict[str, Any]) -> None:
        report = chunk.get("usage")
        if report is None:
            return
        usage = shape.counted(report)
        if usage is None:
            return
        if chunk.get("choices") == []:
            self._final = usage
        else:
            self._last = usage
        self._report = report

    def _usage(self) -> dict[str, Any]:
        usage = self._final or self._last
        if usage is None:
            usage = Usage(self._call.estimated_prompt_tokens(), self._generated)
        return shape.usage_object(usage, self._report)
