"""Anthropic Messages and OpenAI Responses through the gateway to a real vLLM, both ways: translated
to chat completions, and forwarded natively (vLLM serves `/v1/messages` and `/v1/responses`
itself). The weights are random: assert on protocol, token counts and metering, never on text."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import MessageParam

from gateway.model_table import NATIVE, ModelConfig, ModelTable, Protocols, Timeouts
from tests.conftest import Gateway, GatewayFactory
from tests.vllm.conftest import SERVED_NAME

TRANSLATED = "tiny-translated"
NATIVE_MODEL = "tiny-native"
HELLO: list[MessageParam] = [{"role": "user", "content": "Tell me about the weather."}]


@pytest.fixture(scope="module")
def gw(make_gateway_module: GatewayFactory, vllm_url: str) -> Iterator[Gateway]:
    timeouts = Timeouts(first_token=120, idle=60, total=300)
    table = ModelTable(
        (
            ModelConfig(
                name=TRANSLATED, upstream_model=SERVED_NAME, endpoints=(vllm_url,), timeouts=timeouts
            ),
            ModelConfig(
                name=NATIVE_MODEL,
                upstream_model=SERVED_NAME,
                endpoints=(vllm_url,),
                timeouts=timeouts,
                protocols=Protocols(messages=NATIVE, responses=NATIVE),
                tokenize=True,
            ),
        )
    )
    with make_gateway_module(table) as gateway:
        yield gateway


def _metered(gw: Gateway, team: str, requests: int) -> tuple[int, int]:
    deadline = time.monotonic() + 5
    rows: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        rows = gw.usage(team)
        if sum(r["requests"] for r in rows) >= requests:
            break
        time.sleep(0.05)
    assert sum(r["requests"] for r in rows) == requests
    return sum(r["prompt_tokens"] for r in rows), sum(r["completion_tokens"] for r in rows)


@pytest.mark.parametrize("model", [TRANSLATED, NATIVE_MODEL])
def test_messages_whole_and_streamed_are_metered_as_told(gw: Gateway, model: str) -> None:
    key = gw.new_key()
    with anthropic.Anthropic(base_url=gw.url, api_key=key["key"], max_retries=0) as client:
        whole = client.messages.create(model=model, max_tokens=12, messages=HELLO)
        with client.messages.stream(model=model, max_tokens=12, messages=HELLO) as stream:
            kinds = [event.type for event in stream]
            streamed = stream.get_final_message()
    for message in (whole, streamed):
        assert message.model == model
        assert message.stop_reason in ("end_turn", "max_tokens")
        assert 1 <= message.usage.output_tokens <= 12
        assert message.usage.input_tokens > 0
    assert (kinds[0], kinds[-1]) == ("message_start", "message_stop")
    assert whole.usage.input_tokens == streamed.usage.input_tokens
    told = (
        whole.usage.input_tokens + streamed.usage.input_tokens,
        whole.usage.output_tokens + streamed.usage.output_tokens,
    )
    assert _metered(gw, key["team"], 2) == told


def test_count_tokens_is_vllms_own_count_of_the_prompt(gw: Gateway) -> None:
    with anthropic.Anthropic(base_url=gw.url, api_key=gw.new_key()["key"], max_retries=0) as client:
        counted = client.messages.with_raw_response.count_tokens(model=NATIVE_MODEL, messages=HELLO)
        answer = client.messages.create(model=NATIVE_MODEL, max_tokens=2, messages=HELLO)
    assert counted.headers["x-sluicegate-token-count"] == "worker"
    assert counted.parse().input_tokens == answer.usage.input_tokens


@pytest.mark.parametrize("model", [TRANSLATED, NATIVE_MODEL])
def test_responses_whole_and_streamed_are_metered_as_told(gw: Gateway, model: str) -> None:
    key = gw.new_key()
    client = gw.client(key["key"])
    whole = client.responses.create(model=model, input="Tell me about the weather.", max_output_tokens=12)
    events: list[str] = []
    with client.responses.create(
        model=model, input="Tell me about the weather.", max_output_tokens=12, stream=True
    ) as stream:
        final: Any = None
        for event in stream:
            events.append(event.type)
            if event.type in ("response.completed", "response.incomplete"):
                final = event.response
    assert events[0] == "response.created"
    assert events[-1] in ("response.completed", "response.incomplete")
    told = [0, 0]
    for response in (whole, final):
        assert response.model == model
        assert response.usage is not None
        assert 1 <= response.usage.output_tokens <= 12
        told[0] += response.usage.input_tokens
        told[1] += response.usage.output_tokens
    assert _metered(gw, key["team"], 2) == tuple(told)


def test_a_native_response_is_stored_continued_and_scoped_to_its_team(gw: Gateway) -> None:
    client = gw.client(gw.new_key()["key"])
    first = client.responses.create(model=NATIVE_MODEL, input="Hello.", max_output_tokens=4, store=True)
    assert client.responses.retrieve(first.id).id == first.id
    second = client.responses.create(
        model=NATIVE_MODEL, input="And then?", previous_response_id=first.id, max_output_tokens=4
    )
    assert second.usage is not None
    assert first.usage is not None
    # The continuation's prompt holds the first turn: vLLM found it in its own memory.
    assert second.usage.input_tokens > first.usage.input_tokens
    stranger = gw.client(gw.new_key()["key"])
    with pytest.raises(openai.NotFoundError):
        stranger.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=TRANSLATED, input="x", previous_response_id=first.id)
