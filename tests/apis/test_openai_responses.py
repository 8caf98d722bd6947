"""OpenAI Responses (`POST /v1/responses`) through a real gateway to the fake worker, with the real
`openai` SDK as the client: what a user of `client.responses.create` sees, and what is metered.

The fake worker answers `tok0 tok1 …` (x-fake-tokens of them, default 8), counts the words of the
messages it gets as prompt tokens, and calls a tool when x-fake-tool-call names one of the request's
functions; its record of each request (tests.conftest.worker_record) shows the translated body.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest
from openai.types.responses import FunctionToolParam, ResponseInputParam, ResponseTextConfigParam

from tests.conftest import FAKE_MODEL, Gateway, worker_record
from tests.http import get, post
from tests.pipeline.support import wait_requests_metered

WEATHER: FunctionToolParam = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
    "strict": False,
}


def _client(gateway: Gateway) -> tuple[openai.OpenAI, dict[str, Any]]:
    key = gateway.new_key()
    return gateway.client(key["key"]), key


def _tokens(n: int) -> str:
    return "".join(f"tok{i} " for i in range(n))


def test_a_whole_answer_is_a_response_object_with_the_usage_that_was_metered(gateway: Gateway) -> None:
    client, key = _client(gateway)
    response = client.responses.create(
        model=FAKE_MODEL, input="hello there gateway", extra_headers={"x-fake-tokens": "5"}
    )
    assert response.object == "response"
    assert response.id.startswith("resp_")
    assert response.status == "completed"
    assert response.model == FAKE_MODEL
    assert response.output_text == _tokens(5)
    [message] = response.output
    assert message.type == "message"
    assert message.role == "assistant"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (3, 5)
    assert response.usage.total_tokens == 8
    totals = wait_requests_metered(gateway, key["team"], 1)
    assert (totals["prompt_tokens"], totals["completion_tokens"]) == (3, 5)


def test_instructions_and_input_items_reach_the_worker_as_chat_messages(
    gateway: Gateway, fake_worker: str
) -> None:
    client, _ = _client(gateway)
    items: ResponseInputParam = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "input_text", "text": "one two"}]},
        {"role": "assistant", "content": "three"},
        {"role": "user", "content": "four five six"},
    ]
    raw = client.responses.with_raw_response.create(
        model=FAKE_MODEL, instructions="you are a test", input=items, max_output_tokens=50, temperature=0.5
    )
    response = raw.parse()
    # Prompt tokens are the words of every message the worker got: instructions included.
    assert response.usage is not None
    assert response.usage.input_tokens == 4 + 2 + 2 + 1 + 3
    assert response.instructions == "you are a test"
    record = worker_record(fake_worker, raw.headers["x-sluicegate-request-id"])
    assert record is not None
    body = record["body"]
    # Instructions and a leading developer item: one leading system message (chat_shape).
    assert body["messages"] == [
        {"role": "system", "content": "you are a test\n\nbe brief"},
        {"role": "user", "content": "one two"},
        {"role": "assistant", "content": "three"},
        {"role": "user", "content": "four five six"},
    ]
    assert (body["max_tokens"], body["temperature"], body["stream"]) == (50, 0.5, False)


def test_max_output_tokens_makes_an_incomplete_response(gateway: Gateway) -> None:
    client, key = _client(gateway)
    response = client.responses.create(
        model=FAKE_MODEL, input="hi", max_output_tokens=3, extra_headers={"x-fake-tokens": "10"}
    )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == _tokens(3)
    assert response.usage is not None
    assert response.usage.output_tokens == 3
    totals = wait_requests_metered(gateway, key["team"], 1)
    assert totals["completion_tokens"] == 3


def test_a_function_tool_round_trip(gateway: Gateway, fake_worker: str) -> None:
    client, _ = _client(gateway)
    first = client.responses.create(
        model=FAKE_MODEL,
        input="what is the weather",
        tools=[WEATHER],
        tool_choice="auto",
        extra_headers={"x-fake-tool-call": "get_weather"},
    )
    assert first.status == "completed"
    [call] = first.output
    assert call.type == "function_call"
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"x": 1}
    assert call.call_id
    # The caller runs the function and sends its output back with the conversation so far.
    raw = client.responses.with_raw_response.create(
        model=FAKE_MODEL,
        tools=[WEATHER],
        input=[
            {"role": "user", "content": "what is the weather"},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
        ],
        extra_headers={"x-fake-tokens": "2"},
    )
    assert raw.parse().output_text == _tokens(2)
    record = worker_record(fake_worker, raw.headers["x-sluicegate-request-id"])
    assert record is not None
    body = record["body"]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": WEATHER["parameters"],
                "strict": False,
            },
        }
    ]
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": call.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"},
    ]


def test_a_stream_sends_the_events_in_order_and_completes_with_the_metered_usage(gateway: Gateway) -> None:
    client, key = _client(gateway)
    events = list(
        client.responses.create(
            model=FAKE_MODEL, input="hello there gateway", stream=True, extra_headers={"x-fake-tokens": "4"}
        )
    )
    types = [event.type for event in events]
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 4,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert deltas == [f"tok{i} " for i in range(4)]
    final = events[-1]
    assert final.type == "response.completed"
    assert final.response.status == "completed"
    assert final.response.output_text == _tokens(4)
    assert final.response.usage is not None
    assert (final.response.usage.input_tokens, final.response.usage.output_tokens) == (3, 4)
    assert events[0].type == "response.created"
    assert final.response.id == events[0].response.id
    totals = wait_requests_metered(gateway, key["team"], 1)
    assert (totals["prompt_tokens"], totals["completion_tokens"]) == (3, 4)


def test_the_sdk_stream_helper_accumulates_a_streamed_function_call(gateway: Gateway) -> None:
    client, _ = _client(gateway)
    with client.responses.stream(
        model=FAKE_MODEL,
        input="what is the weather",
        tools=[WEATHER],
        extra_headers={"x-fake-tool-call": "get_weather"},
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    fragments = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert fragments == ['{"x": ', "1}"]  # relayed as the worker sent them
    [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done.arguments == '{"x": 1}'
    [call] = final.output
    assert call.type == "function_call"
    assert (call.name, call.arguments) == ("get_weather", '{"x": 1}')


def test_a_stream_cut_short_by_max_output_tokens_ends_incomplete(gateway: Gateway) -> None:
    client, key = _client(gateway)
    events = list(
        client.responses.create(
            model=FAKE_MODEL,
            input="hi",
            stream=True,
            max_output_tokens=2,
            extra_headers={"x-fake-tokens": "9"},
        )
    )
    final = events[-1]
    assert final.type == "response.incomplete"
    assert final.response.incomplete_details is not None
    assert final.response.incomplete_details.reason == "max_output_tokens"
    assert final.response.usage is not None
    assert final.response.usage.output_tokens == 2
    assert wait_requests_metered(gateway, key["team"], 1)["completion_tokens"] == 2


def test_a_worker_failing_mid_stream_becomes_response_failed(gateway: Gateway) -> None:
    client, key = _client(gateway)
    events = list(
        client.responses.create(
            model=FAKE_MODEL, input="hi", stream=True, extra_headers={"x-fake-error-event-after": "2"}
        )
    )
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert deltas == ["tok0 ", "tok1 "]
    final = events[-1]
    assert final.type == "response.failed"
    assert final.response.status == "failed"
    assert final.response.error is not None
    assert "fake worker" in final.response.error.message
    wait_requests_metered(gateway, key["team"], 1)


@pytest.mark.parametrize(
    ("fields", "param", "hint"),
    [
        ({"previous_response_id": "resp_123"}, "previous_response_id", "protocols: {responses: native}"),
        ({"store": True}, "store", "protocols: {responses: native}"),
        (
            {"input": [{"type": "item_reference", "id": "msg_1"}]},
            "input[0]",
            "protocols: {responses: native}",
        ),
        ({"max_output_tokens": 0}, "max_output_tokens", "integer"),
    ],
)
def test_what_a_translated_pool_cannot_do_is_a_400_naming_the_setting(
    gateway: Gateway, fields: dict[str, Any], param: str, hint: str
) -> None:
    client, _key = _client(gateway)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(**{"model": FAKE_MODEL, "input": "hi", **fields})
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["param"] == param
    assert error["code"] == "invalid_request"
    assert hint in error["message"]


def test_stored_response_routes_are_a_404_after_authentication(gateway: Gateway) -> None:
    client, _ = _client(gateway)
    calls: list[Callable[[], object]] = [
        lambda: client.responses.retrieve("resp_123"),
        lambda: client.responses.delete("resp_123"),
        lambda: client.responses.cancel("resp_123"),
        lambda: client.responses.input_items.list("resp_123"),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError) as caught:
            call()
        error = caught.value.body
        assert isinstance(error, dict)
        assert error["code"] == "not_found"
        assert "protocols: {responses: native}" in error["message"]
    # Without a valid key, nothing about the id: 401.
    for reply in (
        get(f"{gateway.url}/v1/responses/resp_123"),
        post(f"{gateway.url}/v1/responses/resp_123/cancel", b"", key="sk-wrong"),
    ):
        assert reply.status == 401
        assert reply.json()["error"]["code"] == "invalid_api_key"


def test_text_format_reasoning_and_a_named_tool_choice_reach_the_worker_in_chat_terms(
    gateway: Gateway, fake_worker: str
) -> None:
    client, _ = _client(gateway)
    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
    text: ResponseTextConfigParam = {
        "format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}
    }
    raw = client.responses.with_raw_response.create(
        model=FAKE_MODEL,
        input="hi",
        text=text,
        reasoning={"effort": "low"},
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        top_p=0.9,
        user="u-1",
    )
    response = raw.parse()
    assert not isinstance(response.tool_choice, str)
    assert response.tool_choice.type == "function"  # echoed as the client sent it
    record = worker_record(fake_worker, raw.headers["x-sluicegate-request-id"])
    assert record is not None
    body = record["body"]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema, "strict": True},
    }
    assert body["reasoning_effort"] == "low"
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert (body["top_p"], body["user"]) == (0.9, "u-1")
