"""A body with more messages, parts in one message or tools than the gateway's bounds is refused
with a 400 naming the limit, in the envelope of the API it came through, before the worker sees it
(the byte limit alone let 240,000 tiny messages cost the event loop half a second a request).

The bounds are lowered here so the bodies stay small; the same body one item under each bound is
answered, so the refusal is the bound's and nothing else's."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory
from tests.http import post
from tests.pipeline.support import envelope

BOUND = 8


def _msgs(n: int) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(n - 1)] + [
        {"role": "user", "content": "hi"}
    ]


def _tool(i: int) -> dict[str, Any]:
    return {"type": "function", "function": {"name": f"t{i}", "parameters": {"type": "object"}}}


# (path, body with n items of the bounded kind, the param the 400 names)
def _chat(n: int) -> tuple[str, dict[str, Any]]:
    return "/v1/chat/completions", {"model": FAKE_MODEL, "messages": _msgs(n)}


def _chat_tools(n: int) -> tuple[str, dict[str, Any]]:
    return "/v1/chat/completions", {
        "model": FAKE_MODEL,
        "messages": _msgs(1),
        "tools": [_tool(i) for i in range(n)],
    }


def _chat_parts(n: int) -> tuple[str, dict[str, Any]]:
    parts = [{"type": "text", "text": f"p{i}"} for i in range(n)]
    return "/v1/chat/completions", {"model": FAKE_MODEL, "messages": [{"role": "user", "content": parts}]}


def _messages(n: int) -> tuple[str, dict[str, Any]]:
    return "/v1/messages", {"model": FAKE_MODEL, "max_tokens": 5, "messages": _msgs(n)}


def _responses(n: int) -> tuple[str, dict[str, Any]]:
    return "/v1/responses", {"model": FAKE_MODEL, "input": _msgs(n)}


def _gemini(n: int) -> tuple[str, dict[str, Any]]:
    contents = [
        {"role": "user" if i % 2 == 0 else "model", "parts": [{"text": f"m{i}"}]} for i in range(n - 1)
    ]
    contents.append({"role": "user", "parts": [{"text": "hi"}]})
    return f"/v1beta/models/{FAKE_MODEL}:generateContent", {"contents": contents}


def _gemini_tools(n: int) -> tuple[str, dict[str, Any]]:
    declarations = [{"name": f"t{i}", "parameters": {"type": "object"}} for i in range(n)]
    return f"/v1beta/models/{FAKE_MODEL}:generateContent", {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "tools": [{"functionDeclarations": declarations}],
    }


CASES = {
    "chat messages": (_chat, "messages"),
    "chat tools": (_chat_tools, "tools"),
    "chat parts": (_chat_parts, "messages[0].content"),
    "messages": (_messages, "messages"),
    "responses input": (_responses, "input"),
    "gemini contents": (_gemini, "contents"),
    "gemini tools": (_gemini_tools, "tools"),
}


@pytest.fixture(scope="module")
def bounded(make_gateway_module: GatewayFactory) -> Iterator[Gateway]:
    with make_gateway_module(max_messages=BOUND, max_content_parts=BOUND, max_tools=BOUND) as gw:
        yield gw


def _send(gw: Gateway, key: str, path: str, body: dict[str, Any]) -> Any:
    headers = {"x-goog-api-key": key} if ":generateContent" in path else None
    return post(gw.url + path, body, key=None if headers else key, headers=headers)


def _message_of(path: str, reply: Any) -> str:
    """The refusal's message, after checking it is the API's own envelope."""
    assert reply.status == 400, f"HTTP {reply.status}: {reply.body[:300]!r}"
    body = json.loads(reply.body)
    if path == "/v1/messages":
        assert body["type"] == "error", body
        assert body["error"]["type"] == "invalid_request_error", body
        return str(body["error"]["message"])
    if ":generateContent" in path:
        assert body["error"]["code"] == 400, body
        assert body["error"]["status"] == "INVALID_ARGUMENT", body
        return str(body["error"]["message"])
    return str(envelope(reply, 400)["message"])


@pytest.mark.parametrize("case", list(CASES))
def test_a_body_over_a_bound_gets_a_400_naming_it_in_its_apis_envelope(bounded: Gateway, case: str) -> None:
    build, param = CASES[case]
    key = bounded.new_key()["key"]
    path, body = build(BOUND)
    reply = _send(bounded, key, path, body)
    assert reply.status == 200, f"a body at the bound was refused: {reply.body[:300]!r}"
    path, body = build(BOUND + 1)
    message = _message_of(path, _send(bounded, key, path, body))
    assert f"'{param}'" in message, message
    assert f"at most {BOUND}" in message, message


# --- JSON values, estimated before the parse (gateway/proxy/translation/bounds.py: check_values) ---

ATTACKS: dict[str, Callable[[], tuple[str, dict[str, Any]]]] = {
    # The fourth review's bodies: 240,000 messages (8.7 MB) and 100,001 Gemini contents.
    "chat messages": lambda: _chat(240_000),
    "messages": lambda: _messages(240_000),
    "gemini contents": lambda: _gemini(100_001),
    "anthropic count_tokens": lambda: (
        "/v1/messages/count_tokens",
        {"model": FAKE_MODEL, "messages": _msgs(240_000)},
    ),
    "gemini countTokens": lambda: (
        f"/v1beta/models/{FAKE_MODEL}:countTokens",
        {"contents": _gemini(100_001)[1]["contents"]},
    ),
}


@pytest.mark.parametrize("case", list(ATTACKS))
def test_a_body_of_too_many_values_is_a_413_before_it_is_parsed(gateway: Gateway, case: str) -> None:
    """A 413 (the bounds' 400 comes only after the parse, which held the loop for 0.15-0.7 s)."""
    key = gateway.new_key()["key"]
    path, body = ATTACKS[case]()
    headers = {"x-goog-api-key": key} if path.startswith("/v1beta/") else None
    reply = post(gateway.url + path, body, key=None if headers else key, headers=headers)
    assert reply.status == 413, f"HTTP {reply.status}: {reply.body[:300]!r}"
    error = json.loads(reply.body)["error"]
    if path.startswith("/v1/messages"):
        assert error["type"] == "request_too_large", error
    elif path.startswith("/v1beta/"):
        assert error["code"] == 413, error
    else:
        assert error["code"] == "request_too_large", error
    assert "at most 200000" in error["message"], error


def test_brace_dense_text_under_the_bound_is_served(gateway: Gateway) -> None:
    """The estimate counts braces and quotes inside strings too: text it counts as 180,000 values
    (one `{`, one `[` and two quotes a unit) passes."""
    key = gateway.new_key()["key"]
    text = '{"a": [1]} ' * 60_000
    reply = post(
        f"{gateway.url}/v1/chat/completions",
        {"model": FAKE_MODEL, "messages": [{"role": "user", "content": text}]},
        key=key,
    )
    assert reply.status == 200, reply.body[:300]
