"""The real `anthropic` SDK through a real gateway to the fake worker: what a user of Anthropic's
Messages API sees, and that what it is told about usage is what the gateway meters.

The fake worker answers `tok0 tok1 …` (8 tokens unless `x-fake-tokens` says otherwise) and counts
a prompt's whitespace-separated words as its tokens; the SDK sends its key as `x-api-key`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from anthropic.types import MessageParam, ToolParam

from gateway.model_table import ModelConfig, ModelTable, Timeouts
from tests.conftest import FAKE_MODEL, OTHER_MODEL, Gateway, GatewayFactory, default_table, worker_record
from tests.pipeline.support import usage_totals, wait_requests_metered

HELLO: list[MessageParam] = [{"role": "user", "content": "hello there gateway"}]  # 3 prompt tokens
DOWN_MODEL = "down-model"  # no endpoint: no worker can ever take it
MAX_BODY = 64 * 1024
WEATHER: ToolParam = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"x": {"type": "integer"}}},
}


@pytest.fixture(scope="module")
def gw(make_gateway_module: GatewayFactory, fake_worker: str) -> Iterator[Gateway]:
    table = default_table(fake_worker)
    down = ModelConfig(name=DOWN_MODEL, endpoints=(), timeouts=Timeouts())
    with make_gateway_module(ModelTable((*table.models, down)), max_body_bytes=MAX_BODY) as gateway:
        yield gateway


def _client(gw: Gateway, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key=key, max_retries=0)


@pytest.fixture
def key(gw: Gateway) -> dict[str, Any]:
    return gw.new_key()


@pytest.fixture
def client(gw: Gateway, key: dict[str, Any]) -> Iterator[anthropic.Anthropic]:
    with _client(gw, key["key"]) as sdk:
        yield sdk


def _metered(gw: Gateway, team: str, requests: int) -> tuple[int, int]:
    totals = wait_requests_metered(gw, team, requests)
    return totals["prompt_tokens"], totals["completion_tokens"]


def test_create_answers_a_message_and_meters_what_it_says(
    gw: Gateway, key: dict[str, Any], client: anthropic.Anthropic
) -> None:
    raw = client.messages.with_raw_response.create(
        model=FAKE_MODEL, max_tokens=64, messages=HELLO, extra_headers={"x-fake-tokens": "5"}
    )
    message = raw.parse()
    assert message.id.startswith("msg_")
    assert (message.type, message.role, message.model) == ("message", "assistant", FAKE_MODEL)
    assert [(b.type, getattr(b, "text", None)) for b in message.content] == [
        ("text", "tok0 tok1 tok2 tok3 tok4 ")
    ]
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)
    assert (message.usage.input_tokens, message.usage.output_tokens) == (3, 5)
    assert raw.headers["request-id"] == raw.headers["x-sluicegate-request-id"]
    assert _metered(gw, key["team"], 1) == (3, 5)


def test_max_tokens_ends_the_answer_with_stop_reason_max_tokens(client: anthropic.Anthropic) -> None:
    message = client.messages.create(model="default", max_tokens=3, messages=HELLO)
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 3
    assert message.model == "default"  # the name the client asked for


def test_system_stop_sequences_sampling_and_user_reach_the_worker_as_chat(
    gw: Gateway, client: anthropic.Anthropic, fake_worker: str
) -> None:
    raw = client.messages.with_raw_response.create(
        model=FAKE_MODEL,
        max_tokens=16,
        system=[{"type": "text", "text": "be brief"}],
        messages=[
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": [{"type": "text", "text": "two"}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"},
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                ],
            },
        ],
        # This SDK's create() names no sampling fields any more; the API still takes them.
        extra_body={"temperature": 0.5, "top_p": 0.9, "top_k": 40},
        stop_sequences=["END"],
        metadata={"user_id": "user-7"},
    )
    sent = worker_record(fake_worker, raw.headers["request-id"])
    assert sent is not None
    body = sent["body"]
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            ],
        },
    ]
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["top_k"]) == (16, 0.5, 0.9, 40)
    assert (body["stop"], body["user"], body["stream"]) == (["END"], "user-7", False)
    # Anthropic's own headers are not the worker's business.
    assert "anthropic-version" not in {k.lower() for k in sent["headers"]}


def test_stream_sends_every_event_in_order_and_meters_the_usage_it_reports(
    gw: Gateway, key: dict[str, Any], client: anthropic.Anthropic
) -> None:
    with client.messages.stream(
        model=FAKE_MODEL, max_tokens=64, messages=HELLO, extra_headers={"x-fake-tokens": "4"}
    ) as stream:
        kinds = [event.type for event in stream if not event.type.startswith(("text", "input_json"))]
        final = stream.get_final_message()
    assert kinds == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * 4,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert final.content[0].type == "text"
    assert final.content[0].text == "tok0 tok1 tok2 tok3 "
    assert (final.stop_reason, final.usage.input_tokens, final.usage.output_tokens) == ("end_turn", 3, 4)
    assert _metered(gw, key["team"], 1) == (3, 4)


def test_the_async_client_creates_and_streams(gw: Gateway, key: dict[str, Any]) -> None:
    async def run() -> tuple[str, list[str]]:
        async with anthropic.AsyncAnthropic(base_url=gw.url, api_key=key["key"], max_retries=0) as sdk:
            message = await sdk.messages.create(model=FAKE_MODEL, max_tokens=2, messages=HELLO)
            pieces: list[str] = []
            async with sdk.messages.stream(model=FAKE_MODEL, max_tokens=3, messages=HELLO) as stream:
                async for text in stream.text_stream:
                    pieces.append(text)
            block = message.content[0]
            assert block.type == "text"
            return block.text, pieces

    text, pieces = asyncio.run(run())
    assert text == "tok0 tok1 "
    assert pieces == ["tok0 ", "tok1 ", "tok2 "]
    assert _metered(gw, key["team"], 2) == (6, 5)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_tool_use_round_trip_with_its_tool_result(
    gw: Gateway, key: dict[str, Any], client: anthropic.Anthropic, fake_worker: str, stream: bool
) -> None:
    call = {"x-fake-tool-call": "get_weather"}
    asked: dict[str, Any] = dict(model=FAKE_MODEL, max_tokens=64, messages=HELLO, tools=[WEATHER])
    if stream:
        with client.messages.stream(**asked, tool_choice={"type": "any"}, extra_headers=call) as events:
            fragments = [e.partial_json for e in events if e.type == "input_json"]
            first = events.get_final_message()
        assert fragments == ['{"x": ', "1}"]  # relayed as they came, not gathered
    else:
        first = client.messages.create(**asked, tool_choice={"type": "any"}, extra_headers=call)
    assert first.stop_reason == "tool_use"
    (use,) = first.content
    assert use.type == "tool_use"
    assert (use.name, use.input) == ("get_weather", {"x": 1})
    assert use.id

    raw = client.messages.with_raw_response.create(
        model=FAKE_MODEL,
        max_tokens=8,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=[
            *HELLO,
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": use.id,
                        "content": [{"type": "text", "text": "sunny"}],
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "other",
                        "content": "no such city",
                        "is_error": True,
                    },
                    {"type": "text", "text": "and now"},
                ],
            },
        ],
    )
    assert raw.parse().stop_reason == "end_turn"
    sent = worker_record(fake_worker, raw.headers["request-id"])
    assert sent is not None
    body = sent["body"]
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": use.id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"x":1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": use.id, "content": "sunny"},
        {"role": "tool", "tool_call_id": "other", "content": "Error: no such city"},
        {"role": "user", "content": [{"type": "text", "text": "and now"}]},
    ]
    function = {
        "name": "get_weather",
        "parameters": WEATHER["input_schema"],
        "description": "The weather in a city.",
    }
    assert body["tools"] == [{"type": "function", "function": function}]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    metered = usage_totals(gw, key["team"])
    assert metered["completion_tokens"] >= first.usage.output_tokens


@pytest.mark.parametrize("form", ["field", "tags"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_reasoning_becomes_a_thinking_block(client: anthropic.Anthropic, form: str, stream: bool) -> None:
    headers = {"x-fake-tokens": "5", "x-fake-reasoning": "2", "x-fake-reasoning-as": form}
    asked: dict[str, Any] = dict(
        model=FAKE_MODEL,
        max_tokens=64,
        messages=HELLO,
        thinking={"type": "enabled", "budget_tokens": 1024},
        extra_headers=headers,
    )
    if stream:
        with client.messages.stream(**asked) as events:
            thinking = "".join(e.thinking for e in events if e.type == "thinking")
            message = events.get_final_message()
        assert thinking == "tok0 tok1 "
    else:
        message = client.messages.create(**asked)
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in message.content] == [
        ("thinking", "tok0 tok1 "),
        ("text", "tok2 tok3 tok4 "),
    ]
    assert message.usage.output_tokens == 5


def test_count_tokens_answers_the_gateways_estimate(gw: Gateway, client: anthropic.Anthropic) -> None:
    raw = client.messages.with_raw_response.count_tokens(model=FAKE_MODEL, messages=HELLO, system="be brief")
    assert raw.headers["x-sluicegate-token-count"] == "estimate"
    counted = raw.parse().input_tokens
    assert counted > 0
    longer = client.messages.count_tokens(
        model=FAKE_MODEL, messages=[{"role": "user", "content": "word " * 400}]
    )
    assert longer.input_tokens > counted


def test_a_mid_stream_failure_is_an_error_event(client: anthropic.Anthropic) -> None:
    received: list[str] = []
    stream = client.messages.stream(
        model=FAKE_MODEL, max_tokens=64, messages=HELLO, extra_headers={"x-fake-error-event-after": "2"}
    )
    with pytest.raises(anthropic.APIStatusError) as failed, stream as events:
        received.extend(events.text_stream)
    assert received == ["tok0 ", "tok1 "]
    assert failed.value.type == "api_error"
    assert "injected error" in str(failed.value)


def _raised(call: Any) -> anthropic.APIStatusError:
    try:
        call()
    except anthropic.APIStatusError as error:
        return error
    raise AssertionError("the request succeeded")


def test_every_refusal_is_the_sdks_own_error_with_anthropics_type(gw: Gateway, key: dict[str, Any]) -> None:
    def create(sdk: anthropic.Anthropic, **fields: Any) -> Any:
        asked: dict[str, Any] = {"model": FAKE_MODEL, "max_tokens": 8, "messages": HELLO, **fields}
        return lambda: sdk.messages.create(**asked)

    limited = gw.new_key(rpm=1)
    other_only = gw.new_key(models=[OTHER_MODEL])
    with (
        _client(gw, key["key"]) as sdk,
        _client(gw, "sk-wrong") as stranger,
        _client(gw, other_only["key"]) as other,
        _client(gw, limited["key"]) as slow,
    ):
        cases = [
            (create(sdk, max_tokens=0), anthropic.BadRequestError, 400, "invalid_request_error"),
            (create(stranger), anthropic.AuthenticationError, 401, "authentication_error"),
            (create(other), anthropic.PermissionDeniedError, 403, "permission_error"),
            (create(sdk, model="no-such-model"), anthropic.NotFoundError, 404, "not_found_error"),
            (create(sdk, system="x" * MAX_BODY), anthropic.ContentTooLargeError, 413, "request_too_large"),
            (create(sdk, model=DOWN_MODEL), anthropic.OverloadedError, 529, "overloaded_error"),
            (
                create(sdk, extra_headers={"x-fake-status": "500"}),
                anthropic.InternalServerError,
                502,
                "api_error",
            ),
            (
                create(sdk, extra_headers={"x-fake-status": "422"}),
                anthropic.UnprocessableEntityError,
                422,
                "invalid_request_error",
            ),
        ]
        create(slow)()
        cases.append((create(slow), anthropic.RateLimitError, 429, "rate_limit_error"))
        for call, kind, status, error_type in cases:
            error = _raised(call)
            assert type(error) is kind, (kind, error)
            assert (error.status_code, error.type) == (status, error_type), error
            assert error.request_id, "no request-id header"
            assert isinstance(error.body, dict)
            assert set(error.body) == {"type", "error"}
            assert error.body["type"] == "error"
        refused = _raised(create(sdk, max_tokens=0))
        assert "max_tokens" in str(refused)
        throttled = _raised(create(slow))
        headers = throttled.response.headers
        assert int(headers["retry-after"]) >= 1
        assert headers["anthropic-ratelimit-requests-limit"] == "1"
        assert headers["anthropic-ratelimit-requests-remaining"] == "0"
        assert headers["anthropic-ratelimit-requests-reset"].endswith("Z")


def test_a_bearer_token_works_as_well_as_x_api_key(gw: Gateway, key: dict[str, Any]) -> None:
    with anthropic.Anthropic(base_url=gw.url, auth_token=key["key"], max_retries=0) as sdk:
        message = sdk.messages.create(model=FAKE_MODEL, max_tokens=2, messages=HELLO)
    assert message.usage.output_tokens == 2
