"""The toy API's dialect: `{"model", "turns": [{"role", "pieces": [{"text"}]}], "tools": [...]}`
translated to the worker's chat contract, answered `{"model", "text", "usage"}`, its errors as
`{"toy_error": {"code", "message"}}`. Whole answers only: the seam is the subject, not streams."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import Response

from gateway.errors import GatewayError
from gateway.limits.admission import Admission
from gateway.limits.output import AskedOutput
from gateway.proxy.dialect import ClientStream
from gateway.proxy.translation.body import field_error, model_of, open_body
from gateway.proxy.translation.bounds import BodyBounds, BodyLists, check_bounds
from gateway.proxy.translation.ignored import Dropped
from gateway.proxy.translation.translated import TranslatedCall

NAME = "toy"
# Names no shared module of the gateway knows: only the API's declaration brings them.
LISTS = BodyLists(items=("turns",), parts=("pieces",), tools=("tools",))
HOSTED_TOOLS = frozenset({"toy_search"})
BOUNDS = BodyBounds(lists=LISTS)  # a parse without the pipeline's (the pipeline hands its own)


@dataclass(frozen=True, slots=True)
class ToyCall(TranslatedCall):
    model: str
    chat: dict[str, Any]
    prompt_estimate: int
    ignored: tuple[str, ...] = ()
    stream: bool = False
    user: str | None = None

    def asked_output(self) -> AskedOutput:
        return AskedOutput(None)

    def estimated_prompt_tokens(self) -> int:
        return self.prompt_estimate


def _messages(turns: Any) -> list[dict[str, Any]]:
    if not isinstance(turns, list) or not turns:
        raise field_error("turns", "must be a non-empty list")
    messages = []
    for index, turn in enumerate(turns):
        pieces = turn.get("pieces") if isinstance(turn, dict) else None
        if not isinstance(pieces, list):
            raise field_error(f"turns[{index}].pieces", "must be a list")
        text = " ".join(str(piece.get("text", "")) for piece in pieces if isinstance(piece, dict))
        messages.append({"role": turn.get("role", "user"), "content": text})
    return messages


def _tools(tools: Any, dropped: Dropped) -> list[dict[str, Any]]:
    kept = []
    for index, tool in enumerate(tools if isinstance(tools, list) else ()):
        kind = tool.get("kind") if isinstance(tool, dict) else None
        if kind == "function":
            kept.append({"type": "function", "function": {"name": tool["name"], "parameters": {}}})
        else:
            dropped.add(f"tools[{index}]", kind)  # a hosted tool: the worker runs none
    return kept


@dataclass(frozen=True, slots=True)
class ToyDialect:
    name: str = NAME
    keepalive: bytes | None = None

    def parse(self, raw: bytes, native_models: Collection[str] = (), bounds: BodyBounds = BOUNDS) -> ToyCall:
        payload = open_body(raw)
        check_bounds(payload, bounds)
        dropped = Dropped()
        chat: dict[str, Any] = {"messages": _messages(payload.get("turns"))}
        tools = _tools(payload.get("tools"), dropped)
        if tools:
            chat["tools"] = tools
        text = sum(len(m["content"]) for m in chat["messages"])
        return ToyCall(model_of(payload), chat, max(1, text // 4), dropped.done())

    def stream(self, call: ToyCall, answer_name: str) -> ClientStream:
        raise AssertionError("the toy API answers whole")

    def whole(self, call: ToyCall, answer: dict[str, Any], body: bytes, answer_name: str) -> bytes:
        text = answer["choices"][0]["message"].get("content") or ""
        return orjson.dumps({"model": answer_name, "text": text, "usage": answer.get("usage")})

    def estimated_completion_tokens(self, answer: dict[str, Any]) -> int:
        return 1

    def error_response(self, error: GatewayError) -> Response:
        return error_response(error)

    def limit_headers(self, admission: Admission) -> dict[str, str]:
        return {}


def error_response(error: GatewayError) -> Response:
    body = {"toy_error": {"code": error.code.wire_code, "message": error.message, "param": error.param}}
    return Response(orjson.dumps(body), status_code=error.status, headers=error.headers)
