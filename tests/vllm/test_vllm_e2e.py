"""The OpenAI SDK through the gateway to a real vLLM. The weights are random: assert on protocol,
token counts and behaviour, never on text."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
import pytest
from openai.types.chat import (
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionNamedToolChoiceParam,
)

from gateway.model_table import ModelConfig, ModelTable, Timeouts
from tests.conftest import Gateway, GatewayFactory
from tests.vllm.conftest import ROOT, SERVED_NAME
from tests.vllm.processes import engine_of
from tests.waiting import wait_until

MODEL = "tiny-llama"  # the gateway's name; the worker serves it as SERVED_NAME
HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Tell me about the weather."}]
PROMPT_ROOM = 100  # tokens left for HELLO under the chat template, with room to spare
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


def _vllm_metric(vllm_url: str, name: str, *, absent: float | None = None, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`; `absent` if there are none,
    else that is a failure."""
    with urllib.request.urlopen(f"{vllm_url}/metrics", timeout=10) as resp:  # noqa: S310
        text = resp.read().decode()
    values = [
        float(value)
        for found, value in re.findall(rf"^{re.escape(name)}\{{([^}}]*)\}} ([0-9.e+-]+)$", text, re.M)
        if all(f'{k}="{v}"' in found.split(",") for k, v in labels.items())
    ]
    if not values and absent is not None:
        return absent
    assert values, f"vLLM exports {name} {labels}"
    return sum(values)


def _load(vllm_url: str) -> float:
    return _vllm_metric(vllm_url, "vllm:num_requests_running") + _vllm_metric(
        vllm_url, "vllm:num_requests_waiting"
    )


def _max_model_len(vllm_url: str) -> int:
    with urllib.request.urlopen(f"{vllm_url}/v1/models", timeout=10) as resp:  # noqa: S310
        (card,) = [m for m in json.load(resp)["data"] if m["id"] == SERVED_NAME]
    length: int = card["max_model_len"]
    return length


@dataclass(frozen=True)
class _Counts:
    completed: float
    """Requests vLLM generated to their end, whatever the finished_reason."""
    generated: float
    """Tokens vLLM generated."""
    responses: float
    """Chat responses its API server has ended, a client that left included."""

    @classmethod
    def read(cls, vllm_url: str) -> _Counts:
        return cls(
            _vllm_metric(vllm_url, "vllm:request_success_total"),
            _vllm_metric(vllm_url, "vllm:generation_tokens_total"),
            # A labelled series appears with its first request.
            _vllm_metric(vllm_url, "http_requests_total", absent=0, handler="/v1/chat/completions"),
        )


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
    # The whole window the prompt leaves: minutes of generation here, seconds on the fastest CPU.
    max_tokens = _max_model_len(vllm_url) - PROMPT_ROOM
    port = urlsplit(vllm_url).port
    assert port is not None
    with engine_of(port) as engine:
        if engine is None:
            pytest.skip("the vLLM behind SLUICEGATE_VLLM_URL runs where this test cannot pause it")
        before = _Counts.read(vllm_url)
        with client.chat.completions.with_streaming_response.create(
            model=MODEL, messages=HELLO, max_tokens=max_tokens, stream=True, extra_body={"ignore_eos": True}
        ) as raw:
            received = 0
            for chunk in raw.parse():
                if chunk.choices and chunk.choices[0].delta.content:
                    received += 1
                if received >= 10:
                    break
            # vLLM's engine stops generating here, so the hang-up below reaches vLLM before it can
            # get any further, however fast this machine is or however late the chunks came.
            engine.freeze()
        # The client has hung up. Its API server, which still runs, ends the response once the
        # gateway has closed the worker connection, and aborts the generation on its way out.
        wait_until(
            lambda: _Counts.read(vllm_url).responses > before.responses,
            30,
            what="vLLM to see the gateway close the stream of the client that left",
        )
    # The engine runs again, the abort waiting for it.
    wait_until(lambda: _load(vllm_url) == 0, 30, what="vLLM to stop generating for the client that left")
    after = _Counts.read(vllm_url)
    generated = after.generated - before.generated
    # vLLM counts requests it completes (finished_reason stop/length/...); one its client abandons
    # is aborted, and a client-side abort is counted nowhere (seen on vLLM 0.32.0).
    assert after.completed == before.completed, (
        f"vLLM completed the generation ({generated:.0f} tokens) instead of aborting it"
    )
    assert 10 <= generated < max_tokens
    row = _usage(vllm_gateway, key["team"])
    assert row["disconnects"] == 1
    assert 10 <= row["completion_tokens"] < max_tokens


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
            "-rs",
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
            # vLLM serves Anthropic Messages, OpenAI Responses and /tokenize itself; it stores
            # responses because serve.sh sets VLLM_ENABLE_RESPONSES_API_STORE=1 (a vLLM given by
            # SLUICEGATE_VLLM_URL needs it too). It has no DELETE or input_items route: RSP-9 and
            # RSP-10, SHOULDs, are its XFAILs.
            "--worker-messages",
            "--worker-responses",
            "--worker-responses-store",
            "--worker-tokenize",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(ROOT),
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "was not declared to serve" not in result.stdout, result.stdout[-4000:]
    assert "rules broken: none" in result.stdout, result.stdout[-4000:]
