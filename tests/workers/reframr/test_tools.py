"""Tool calls both ways: OpenAI `tools` -> `<tool_call> NAME {json}` -> `tool_calls`, and `tool`
messages back into Reframr's context; plus the context format itself."""

from __future__ import annotations

import json
from typing import Any, cast

import openai
import pytest

from tests.workers.reframr.support import MODEL, call, chat, sse_chunks
from workers.common.errors import RequestError
from workers.reframr.context import compose_chat_context, last_turn
from workers.reframr.deterministic import DeterministicEngine
from workers.reframr.tools import callable_tools, parse_tool_calls

pytestmark = pytest.mark.timeout(10)

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {}}}},
}
CLOCK: dict[str, Any] = {"type": "function", "function": {"name": "clock"}}
ASK = 'call get_weather {"city": "Paris"}'


def _ask(client: openai.OpenAI, content: str, **extra: Any) -> Any:
    tools: list[Any] = [WEATHER, CLOCK]
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": content}], tools=tools, **extra
    )


# --- over HTTP ----------------------------------------------------------------------------------


def test_tool_call_round_trip(client: openai.OpenAI, engine: DeterministicEngine) -> None:
    answer = _ask(client, ASK)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call_,) = choice.message.tool_calls or []
    assert call_.type == "function"
    assert call_.id.startswith("chatcmpl-tool-")
    assert call_.function.name == "get_weather"
    assert isinstance(call_.function.arguments, str)
    assert json.loads(call_.function.arguments) == {"city": "Paris"}

    # The host runs the tool and sends its result back: it reaches Reframr as a tool result.
    messages: list[Any] = [
        {"role": "user", "content": ASK},
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call_.id, "content": '{"temp_c": 21}'},
    ]
    final = client.chat.completions.create(model=MODEL, messages=messages, tools=[cast(Any, WEATHER)])
    assert engine.calls[-1].context.endswith(
        'Assistant: <tool_call> get_weather {"city": "Paris"}\n\n'
        '<tool_result> get_weather {"temp_c": 21}\n\nAssistant:'
    )
    assert final.choices[0].finish_reason == "stop"
    assert (final.choices[0].message.content or "").startswith('mode=default get_weather {"temp_c": 21}')


def test_streamed_tool_call_shape(base_url: str) -> None:
    body = chat(ASK, tools=[WEATHER], stream=True, stream_options={"include_usage": True})
    status, _, raw = call(base_url, "POST", "/v1/chat/completions", body)
    assert status == 200
    role, start, *fragments, usage = sse_chunks(raw)
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    (first,) = start["choices"][0]["delta"]["tool_calls"]
    assert first["id"].startswith("chatcmpl-tool-")
    assert (first["index"], first["type"]) == (0, "function")
    assert first["function"] == {"name": "get_weather", "arguments": ""}
    arguments = ""
    for chunk in fragments:
        (delta,) = chunk["choices"][0]["delta"]["tool_calls"]
        assert set(delta) == {"index", "function"}
        assert delta["index"] == 0
        arguments += delta["function"]["arguments"]
    assert len(fragments) >= 2
    assert json.loads(arguments) == {"city": "Paris"}
    assert [c["choices"][0]["finish_reason"] for c in fragments][-2:] == [None, "tool_calls"]
    assert usage["usage"]["completion_tokens"] == 4


def test_sdk_stream_reassembles_tool_call(client: openai.OpenAI) -> None:
    stream = _ask(client, ASK, stream=True)
    name, arguments, finish = "", "", None
    with stream:
        for chunk in stream:
            for delta in chunk.choices[0].delta.tool_calls or []:
                name += (delta.function and delta.function.name) or ""
                arguments += (delta.function and delta.function.arguments) or ""
            finish = chunk.choices[0].finish_reason or finish
    assert (name, json.loads(arguments), finish) == ("get_weather", {"city": "Paris"}, "tool_calls")


@pytest.mark.parametrize(
    ("content", "extra"),
    [
        ('call delete_everything {"really": true}', {}),  # not an offered tool
        ("call get_weather {oops", {}),  # arguments are not JSON
        ('call get_weather ["Paris"]', {}),  # arguments are not an object
        (ASK, {"tool_choice": "none"}),
        (ASK, {"tool_choice": {"type": "function", "function": {"name": "clock"}}}),  # another tool named
    ],
)
def test_refused_calls_stay_text(client: openai.OpenAI, content: str, extra: dict[str, Any]) -> None:
    answer = _ask(client, content, **extra)
    choice = answer.choices[0]
    assert choice.finish_reason == "stop"
    assert not choice.message.tool_calls
    assert (choice.message.content or "").startswith("<tool_call> ")


def test_refused_call_streams_as_text(base_url: str) -> None:
    body = chat('call nope {"a": 1}', tools=[WEATHER], stream=True)
    chunks = sse_chunks(call(base_url, "POST", "/v1/chat/completions", body)[2])
    assert all("tool_calls" not in c["choices"][0]["delta"] for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == '<tool_call> nope {"a": 1}'


def test_bad_tool_requests(base_url: str) -> None:
    for extra, param in (
        ({"tools": "get_weather"}, "tools"),
        ({"tools": [{"type": "function"}]}, "tools"),
        ({"tool_choice": "auto"}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}}, "tool_choice"),
    ):
        status, _, raw = call(base_url, "POST", "/v1/chat/completions", chat("x", **extra))
        assert status == 400
        assert json.loads(raw)["error"]["param"] == param


# --- units --------------------------------------------------------------------------------------


def test_parse_tool_calls() -> None:
    allowed = frozenset({"a", "web.search"})
    calls = parse_tool_calls(' <tool_call> a {"x": [1, 2]}\n<tool_call>web.search{"q": "é"} ', allowed)
    assert calls is not None
    assert [(c.name, c.arguments) for c in calls] == [("a", '{"x": [1, 2]}'), ("web.search", '{"q": "é"}')]
    for text in (
        '<tool_call> a {"x": 1} and then',
        'so <tool_call> a {"x": 1}',
        "<tool_call> a",
        "<tool_call>",
    ):
        assert parse_tool_calls(text, allowed) is None, text


def test_callable_tools() -> None:
    assert callable_tools({}) is None
    assert callable_tools({"tools": [WEATHER, CLOCK]}) == frozenset({"get_weather", "clock"})
    assert callable_tools({"tools": [WEATHER], "tool_choice": "required"}) == frozenset({"get_weather"})
    assert callable_tools({"tools": [WEATHER], "tool_choice": "none"}) is None
    named = {"type": "function", "function": {"name": "clock"}}
    assert callable_tools({"tools": [WEATHER, CLOCK], "tool_choice": named}) == frozenset({"clock"})
    with pytest.raises(RequestError):
        callable_tools({"tools": [WEATHER], "tool_choice": "sometimes"})


def test_context_format() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Weather"}, {"type": "text", "text": "in Oslo?"}],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true}'},
        {"role": "developer", "content": "Cite sources."},
        {"role": "assistant", "content": "Sunny."},
        {"role": "user", "content": "Thanks"},
    ]
    assert compose_chat_context(messages) == (
        "System: Be brief.\nCite sources.\n\n"
        "User: Weather\nin Oslo?\n\n"
        "Assistant: <tool_call> w {}\n\n"
        '<tool_result> w {"ok": true}\n\n'
        "Assistant: Sunny.\n\n"
        "User: Thanks\n\n"
        "Assistant:"
    )
    assert last_turn(compose_chat_context(messages)) == "User: Thanks"


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [{"role": "wizard", "content": "x"}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}],
        [{"role": "user", "content": 7}],
    ],
)
def test_context_rejects(messages: list[Any]) -> None:
    with pytest.raises(RequestError) as err:
        compose_chat_context(messages)
    assert (err.value.status, err.value.param) == (400, "messages")
