"""Google's Gemini API through the gateway to a real vLLM, translated to chat completions, with the
real `google-genai` SDK. The weights are random: assert on protocol, token counts and metering,
never on text."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from google import genai
from google.genai import types

from gateway.model_table import ModelConfig, ModelTable, Timeouts
from tests.conftest import Gateway, GatewayFactory
from tests.vllm.conftest import SERVED_NAME

MODEL = "tiny-gemini"
HELLO = "Tell me about the weather."


@pytest.fixture(scope="module")
def gw(make_gateway_module: GatewayFactory, vllm_url: str) -> Iterator[Gateway]:
    timeouts = Timeouts(first_token=120, idle=60, total=300)
    table = ModelTable(
        (
            ModelConfig(
                name=MODEL,
                upstream_model=SERVED_NAME,
                endpoints=(vllm_url,),
                timeouts=timeouts,
                tokenize=True,
            ),
        )
    )
    with make_gateway_module(table) as gateway:
        yield gateway


def _client(gw: Gateway, key: str) -> genai.Client:
    return genai.Client(api_key=key, http_options=types.HttpOptions(base_url=gw.url, api_version="v1beta"))


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


def test_generate_whole_and_streamed_are_metered_as_told(gw: Gateway) -> None:
    key = gw.new_key()
    config = types.GenerateContentConfig(max_output_tokens=12)
    with _client(gw, key["key"]) as client:
        whole = client.models.generate_content(model=MODEL, contents=HELLO, config=config)
        chunks = list(client.models.generate_content_stream(model=MODEL, contents=HELLO, config=config))
    last = chunks[-1]
    for answer in (whole, last):
        assert answer.model_version == MODEL
        assert answer.candidates is not None
        assert answer.candidates[0].finish_reason in (types.FinishReason.STOP, types.FinishReason.MAX_TOKENS)
        usage = answer.usage_metadata
        assert usage is not None
        assert usage.prompt_token_count
        assert 1 <= (usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0) <= 12
        assert usage.total_token_count == usage.prompt_token_count + (usage.candidates_token_count or 0) + (
            usage.thoughts_token_count or 0
        )
    assert whole.usage_metadata is not None
    assert last.usage_metadata is not None
    assert whole.usage_metadata.prompt_token_count == last.usage_metadata.prompt_token_count
    told = (
        (whole.usage_metadata.prompt_token_count or 0) + (last.usage_metadata.prompt_token_count or 0),
        (whole.usage_metadata.total_token_count or 0)
        + (last.usage_metadata.total_token_count or 0)
        - (whole.usage_metadata.prompt_token_count or 0)
        - (last.usage_metadata.prompt_token_count or 0),
    )
    assert _metered(gw, key["team"], 2) == told


def test_count_tokens_is_vllms_own_count_of_the_prompt(gw: Gateway) -> None:
    key = gw.new_key()
    with _client(gw, key["key"]) as client:
        counted = client.models.count_tokens(model=MODEL, contents=HELLO)
        answer = client.models.generate_content(
            model=MODEL, contents=HELLO, config=types.GenerateContentConfig(max_output_tokens=1)
        )
    assert answer.usage_metadata is not None
    assert counted.total_tokens == answer.usage_metadata.prompt_token_count
