"""The OpenAI SDK through the gateway to a real vLLM. The weights are random: assert on protocol,
token counts and behaviour, never on text."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import (
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionNamedToolChoiceParam,
)

from gateway.config import ModelConfig, ModelTable, Timeouts
from tests.conftest import Gateway, GatewayFactory
from tests.vllm.conftest import ROOT, SERVED_NAME

MODEL = "tiny-llama"  # the gateway's name; the worker serves it as SERVED_NAME
HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Tell me about the weather."}]
WEATHER_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Lagos"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def vllm_gateway(make_gateway_module: GatewayFactory, vllm_url: str) -> Iterator[Gateway]:
    table = ModelTable(
        (
            ModelConfig(
                name=MODEL,
                upstream_model=SERVED_NAME,
                endpoints=(vllm_url,),
                timeouts=Timeouts(first_token=120, idle=60, total=300),
            ),
            ModelConfig(name="not-served", endpoints=(vllm_url,)),
        )
    )
    with make_gateway_module(table) as gw:
        yield gw


def _vllm_metric(vllm_url: str, name: str) -> float:
    with urllib.request.urlopen(f"{vllm_url}/metrics", timeout=10) as resp:  # noqa: S310
        text = resp.read().decode()
    pattern = rf"^{re.escape(name)}\{{[^}}]*\}} ([0-9.e+-]+)$"
    values = [float(m) for m in re.findall(pattern, text, re.M)]
    assert values, f"vLLM exports {name}"
    return sum(values)


def _running(vllm_url: str) -> float:
    return _vllm_metric(vllm_url, "vllm:num_requests_running")


def _usage(gw: Gateway, team: str) -> dict[str, Any]:
    deadline = time.monotonic() + 3
    rows = gw.usage(team)
    while not rows and time.monotonic() < deadline:
        time.sleep(0.05)
        rows = gw.usage(team)
    (row,) = rows
    return row


def test_non_stream_chat_usage_is_metered_exactly(vllm_gateway: Gateway) -> None:
    key = vllm_gateway.new_key()
    reply = vllm_gateway.client(key["key"]).chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=8, temperature=0, extra_body={"ignore_eos": True}
    )
    assert reply.model == MODEL
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 8
    row = _usage(vllm_gateway, key["team"])
    assert (row["prompt_tokens"], row["completion_tokens"]) == (reply.usage.prompt_tokens, 8)


def test_stream_chat_with_and_without_usage_is_metered_exactly(vllm_gateway: Gateway) -> None:
    key = vllm_gateway.new_key()
    client = vllm_gateway.client(key["key"])
    with_usage = list(
        client.chat.completions.create(
            model=MODEL,
            messages=HELLO,
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    usage = with_usage[-1].usage
    assert usage is not None
    assert with_usage[-1].choices == []
    assert usage.completion_tokens == 12
    assert {c.model for c in with_usage} == {MODEL}
    without = list(
        client.chat.completions.create(
            model=MODEL, messages=HELLO, max_tokens=12, stream=True, extra_body={"ignore_eos": True}
        )
    )
    assert all(c.usage is None for c in without)
    assert without[-1].choices[0].finish_reason == "length"
    row = _usage(vllm_gateway, key["team"])
    # The gateway asked vLLM for usage on both streams; the same prompt counts the same.
    assert (row["requests"], row["prompt_tokens"], row["completion_tokens"]) == (
        2,
        2 * usage.prompt_tokens,
        24,
    )


def test_client_disconnect_aborts_the_generation_in_vllm(vllm_gateway: Gateway, vllm_url: str) -> None:
    key = vllm_gateway.new_key()
    client = vllm_gateway.client(key["key"])
    generated_before = _vllm_metric(vllm_url, "vllm:generation_tokens_total")
    with client.chat.completions.with_streaming_response.create(
        model=MODEL, messages=HELLO, max_tokens=1800, stream=True, extra_body={"ignore_eos": True}
    ) as raw:
        received = 0
        for chunk in raw.parse():
            if chunk.choices and chunk.choices[0].delta.content:
                received += 1
            if received >= 10:
                break
    # The client has hung up. Asking vLLM whether it is still generating at that moment would race
    # with a fast CPU finishing all 1,800 tokens; what it generated in all is the proof instead.
    left = time.monotonic()
    while _running(vllm_url) > 0 and time.monotonic() - left < 5:
        time.sleep(0.05)
    assert _running(vllm_url) == 0, "vLLM still generating 5 s after the client left"
    generated = _vllm_metric(vllm_url, "vllm:generation_tokens_total") - generated_before
    assert 10 <= generated < 1800, f"vLLM generated {generated} tokens: the disconnect did not stop it"
    row = _usage(vllm_gateway, key["team"])
    assert row["disconnects"] == 1
    assert 10 <= row["completion_tokens"] < 1800


def test_unknown_model_is_404_from_the_gateway_and_from_vllm(vllm_gateway: Gateway) -> None:
    client = vllm_gateway.client(vllm_gateway.new_key()["key"])
    with pytest.raises(openai.NotFoundError) as ours:
        client.chat.completions.create(model="nope", messages=HELLO)
    assert ours.value.body["code"] == "model_not_found"  # type: ignore[index]
    # Configured at the gateway but not served by the worker: vLLM's own 404 reaches the client.
    with pytest.raises(openai.NotFoundError) as theirs:
        client.chat.completions.create(model="not-served", messages=HELLO, max_tokens=4)
    assert "does not exist" in str(theirs.value.body)


def test_named_tool_call_round_trips_through_the_gateway(vllm_gateway: Gateway) -> None:
    client = vllm_gateway.client(vllm_gateway.new_key()["key"])
    choice: ChatCompletionNamedToolChoiceParam = {"type": "function", "function": {"name": "get_weather"}}
    reply = client.chat.completions.create(
        model=MODEL,
        messages=HELLO,
        tools=[WEATHER_TOOL],
        tool_choice=choice,
        max_tokens=64,
        temperature=0,
    )
    calls = reply.choices[0].message.tool_calls
    assert calls, reply
    call = calls[0]
    assert call.type == "function"
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert call.function.name == "get_weather"
    assert isinstance(call.function.arguments, str)
    streamed = list(
        client.chat.completions.create(
            model=MODEL,
            messages=HELLO,
            tools=[WEATHER_TOOL],
            tool_choice=choice,
            max_tokens=64,
            stream=True,
        )
    )
    deltas = [d for c in streamed if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    assert deltas, "tool calls are streamed as tool_calls deltas"
    assert deltas[0].function is not None
    assert deltas[0].function.name == "get_weather"
    # The arguments are streamed in pieces that concatenate to one JSON string.
    assert "".join(d.function.arguments or "" for d in deltas if d.function).startswith("{")


def test_conformance_suite_passes_against_vllm(vllm_url: str) -> None:
    suite = ROOT / "workers" / "conformance"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(suite),
            "-q",
            "-p",
            "no:cacheprovider",
            "--worker-url",
            vllm_url,
            "--worker-model",
            SERVED_NAME,
            "--worker-tools",
            # With random weights only a forced call is certain (see workers/vllm/README.md).
            "--worker-tool-choice",
            "required",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(ROOT),
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
