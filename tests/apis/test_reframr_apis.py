"""Anthropic Messages, OpenAI Responses and Google's Gemini API, translated, in front of the
Reframr worker (its deterministic engine), with the real SDKs: a worker that speaks only the chat
contract serves all three, tool calls included, and what each client is told about usage is what is metered.

The engine answers `mode=default`, then the words of the last turn, then filler `w<i>`, up to
`max_tokens` words (one word a token); `call NAME ARGS` in the last user turn makes it call NAME.
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest
from anthropic.types import MessageParam, ToolParam
from google import genai
from google.genai import types

from gateway.model_table import ModelConfig, ModelTable
from tests.conftest import Gateway, GatewayFactory
from tests.pipeline.support import wait_requests_metered
from tests.servers import run_uvicorn
from tests.workers.reframr.support import MODEL
from workers.reframr import create_app
from workers.reframr.deterministic import DeterministicEngine

WEATHER: ToolParam = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def gw(make_gateway_module: GatewayFactory) -> Iterator[Gateway]:
    with run_uvicorn(create_app(DeterministicEngine(), MODEL)) as worker:
        table = ModelTable((ModelConfig(name=MODEL, endpoints=(worker,)),))
        with make_gateway_module(table) as gateway:
            yield gateway


def _metered(gw: Gateway, team: str, requests: int) -> tuple[int, int]:
    totals = wait_requests_metered(gw, team, requests)
    return totals["prompt_tokens"], totals["completion_tokens"]


def test_messages_whole_and_streamed(gw: Gateway) -> None:
    key = gw.new_key()
    hello: list[MessageParam] = [{"role": "user", "content": "hello there"}]
    with anthropic.Anthropic(base_url=gw.url, api_key=key["key"], max_retries=0) as client:
        message = client.messages.create(model=MODEL, max_tokens=5, messages=hello)
        with client.messages.stream(model=MODEL, max_tokens=4, messages=hello) as stream:
            streamed = "".join(stream.text_stream)
            final = stream.get_final_message()
    text = "".join(getattr(b, "text", "") for b in message.content)
    assert text.split() == ["mode=default", "hello", "there", "w3", "w4"]
    assert message.stop_reason == "max_tokens"
    assert streamed.split() == ["mode=default", "hello", "there", "w3"]
    told = (
        message.usage.input_tokens + final.usage.input_tokens,
        message.usage.output_tokens + final.usage.output_tokens,
    )
    assert told[1] == 9
    assert _metered(gw, key["team"], 2) == told


def test_a_messages_tool_use_round_trip(gw: Gateway) -> None:
    key = gw.new_key()
    ask: list[MessageParam] = [{"role": "user", "content": 'call get_weather {"city": "Paris"}'}]
    with anthropic.Anthropic(base_url=gw.url, api_key=key["key"], max_retries=0) as client:
        first = client.messages.create(model=MODEL, max_tokens=64, messages=ask, tools=[WEATHER])
        assert first.stop_reason == "tool_use"
        use = next(b for b in first.content if b.type == "tool_use")
        assert (use.name, use.input) == ("get_weather", {"city": "Paris"})
        second = client.messages.create(
            model=MODEL,
            max_tokens=6,
            tools=[WEATHER],
            messages=[
                *ask,
                {"role": "assistant", "content": first.content},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}],
                },
            ],
        )
    assert second.stop_reason in ("end_turn", "max_tokens")
    assert "sunny" in "".join(getattr(b, "text", "") for b in second.content)


def test_responses_whole_and_streamed(gw: Gateway) -> None:
    key = gw.new_key()
    client = gw.client(key["key"])
    whole = client.responses.create(model=MODEL, input="hello there", max_output_tokens=5)
    assert whole.output_text.split() == ["mode=default", "hello", "there", "w3", "w4"]
    assert whole.status == "incomplete"
    # Long enough to complete: the SDK's stream helper wants response.completed.
    with client.responses.stream(model=MODEL, input="hello there", max_output_tokens=40) as stream:
        final = stream.get_final_response()
    assert final.output_text.split() == ["mode=default", "hello", "there", *(f"w{i}" for i in range(3, 12))]
    assert whole.usage is not None
    assert final.usage is not None
    told = (
        whole.usage.input_tokens + final.usage.input_tokens,
        whole.usage.output_tokens + final.usage.output_tokens,
    )
    assert _metered(gw, key["team"], 2) == told


def test_a_responses_function_call(gw: Gateway) -> None:
    client = gw.client(gw.new_key()["key"])
    answer = client.responses.create(
        model=MODEL,
        input='call get_weather {"city": "Paris"}',
        tools=[
            {
                "type": "function",
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                "strict": False,
            }
        ],
    )
    calls = [item for item in answer.output if item.type == "function_call"]
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", '{"city": "Paris"}')]


def _gemini(gw: Gateway, key: str) -> genai.Client:
    return genai.Client(api_key=key, http_options=types.HttpOptions(base_url=gw.url, api_version="v1beta"))


def test_gemini_whole_and_streamed(gw: Gateway) -> None:
    key = gw.new_key()
    with _gemini(gw, key["key"]) as client:
        whole = client.models.generate_content(
            model=MODEL, contents="hello there", config=types.GenerateContentConfig(max_output_tokens=5)
        )
        chunks = list(
            client.models.generate_content_stream(
                model=MODEL, contents="hello there", config=types.GenerateContentConfig(max_output_tokens=4)
            )
        )
    assert (whole.text or "").split() == ["mode=default", "hello", "there", "w3", "w4"]
    assert whole.candidates is not None
    assert whole.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    assert "".join(c.text or "" for c in chunks).split() == ["mode=default", "hello", "there", "w3"]
    assert whole.usage_metadata is not None
    last = chunks[-1].usage_metadata
    assert last is not None
    told = (
        (whole.usage_metadata.prompt_token_count or 0) + (last.prompt_token_count or 0),
        (whole.usage_metadata.candidates_token_count or 0) + (last.candidates_token_count or 0),
    )
    assert told[1] == 9
    assert _metered(gw, key["team"], 2) == told


def test_a_gemini_function_calling_round_trip(gw: Gateway) -> None:
    weather = types.FunctionDeclaration(
        name="get_weather",
        description="The weather in a city.",
        parameters=types.Schema(
            type=types.Type.OBJECT, properties={"city": types.Schema(type=types.Type.STRING)}
        ),
    )
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[weather])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        max_output_tokens=64,
    )
    ask = types.Content(role="user", parts=[types.Part(text='call get_weather {"city": "Paris"}')])
    with _gemini(gw, gw.new_key()["key"]) as client:
        first = client.models.generate_content(model=MODEL, contents=[ask], config=config)
        (call,) = first.function_calls or []
        assert (call.name, call.args) == ("get_weather", {"city": "Paris"})
        assert first.candidates is not None
        result = types.Part.from_function_response(name="get_weather", response={"output": "sunny"})
        second = client.models.generate_content(
            model=MODEL,
            contents=[ask, first.candidates[0].content, types.Content(role="user", parts=[result])],
            config=config,
        )
    assert "sunny" in (second.text or "")
