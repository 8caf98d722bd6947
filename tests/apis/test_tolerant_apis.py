"""What coding agents send, through a real gateway to the fake worker, with the real `anthropic`
and `openai` SDKs (issue 20): a system message after the first user turn, Anthropic's and
OpenAI's hosted tools, Codex's namespace tool, fields with no chat equivalent. Served on
translated and native pools, what was dropped named in x-sluicegate-ignored and counted; a model
with `hosted_tools: refuse` refuses instead."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from gateway.model_table import NATIVE, ModelConfig, ModelTable, Protocols
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory, default_table, worker_record
from tests.http import post
from tests.pipeline.support import metric_sum

REFUSING = "refusing-model"
NORMALISED = "normalised-native-model"
IGNORED = "x-sluicegate-ignored"


@pytest.fixture(scope="module")
def gw(make_gateway_module: GatewayFactory, fake_worker: str) -> Iterator[Gateway]:
    refusing = ModelConfig(
        name=REFUSING, upstream_model=FAKE_MODEL, endpoints=(fake_worker,), hosted_tools="refuse"
    )
    normalised = ModelConfig(
        name=NORMALISED,
        upstream_model=FAKE_MODEL,
        endpoints=(fake_worker,),
        protocols=Protocols(messages=NATIVE, responses=NATIVE),
        native_normalise=True,
    )
    table = ModelTable((*default_table(fake_worker).models, refusing, normalised))
    with make_gateway_module(table) as gateway:
        yield gateway


def _claude_code(model: str) -> dict[str, Any]:
    """A Claude Code 2.1.332 turn's shape (captured), texts replaced."""
    return {
        "model": model,
        "max_tokens": 64,
        "system": [{"type": "text", "text": "you are an agent", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "say hi"}]},
            {"role": "system", "content": [{"type": "text", "text": "environment notes"}]},
        ],
        "tools": [
            {"name": "Read", "description": "read a file", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 8},
        ],
        "metadata": {"user_id": "u"},
        "extra_body": {
            "thinking": {"type": "adaptive", "display": "omitted"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            "output_config": {"effort": "high"},
        },
    }


def _codex(model: str, **extra: Any) -> dict[str, Any]:
    """A Codex 0.169.0 turn's shape, texts replaced."""
    return {
        "model": model,
        "instructions": "codex",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "perms"}]},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "env"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        ],
        "tools": [
            {"type": "function", "name": "shell", "strict": False, "parameters": {"type": "object"}},
            {
                "type": "namespace",
                "name": "multi_agent_v1",
                "description": "agents",
                "tools": [{"type": "function", "name": "spawn", "parameters": {"type": "object"}}],
            },
            {"type": "web_search", "external_web_access": False},
        ],
        "store": False,
        "parallel_tool_calls": True,
        "reasoning": {"summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "session-1",
        **extra,
    }


def _anthropic(gw: Gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key=gw.new_key()["key"], max_retries=0)


def _openai(gw: Gateway) -> openai.OpenAI:
    return gw.client(gw.new_key()["key"])


def test_a_claude_code_turn_is_served_with_its_system_message_folded_and_drops_named(
    gw: Gateway, fake_worker: str
) -> None:
    before = metric_sum(gw, "sluicegate_ignored_fields_total", api="messages", field="output_config") or 0
    with _anthropic(gw) as client:
        raw = client.messages.with_raw_response.create(**_claude_code(FAKE_MODEL))
    message = raw.parse()
    assert message.content[0].type == "text"
    assert set(raw.headers[IGNORED].split(",")) == {
        "tools[1]:web_search_20250305",
        "context_management",
        "output_config",
    }
    record = worker_record(fake_worker, raw.headers["x-sluicegate-request-id"])
    assert record is not None
    sent = record["body"]["messages"]
    assert [m["role"] for m in sent] == ["system", "user"]
    assert sent[1]["content"][-1] == {"type": "text", "text": "environment notes"}
    assert [t["function"]["name"] for t in record["body"]["tools"]] == ["Read"]
    after = metric_sum(gw, "sluicegate_ignored_fields_total", api="messages", field="output_config")
    assert after == before + 1


def test_count_tokens_takes_a_system_message_anywhere(gw: Gateway) -> None:
    body = _claude_code(FAKE_MODEL)
    del body["max_tokens"], body["metadata"]
    with _anthropic(gw) as client:
        raw = client.messages.with_raw_response.count_tokens(**body)
    assert raw.parse().input_tokens > 0
    assert "output_config" in raw.headers[IGNORED]


def test_an_empty_answer_streams_one_text_block(gw: Gateway) -> None:
    body = _claude_code(FAKE_MODEL)
    body["extra_headers"] = {"x-fake-tokens": "0"}
    with _anthropic(gw) as client, client.messages.stream(**body) as stream:
        final = stream.get_final_message()
    assert [(b.type, getattr(b, "text", None)) for b in final.content] == [("text", "")]


def test_the_ignored_header_is_on_an_error_answer_too(gw: Gateway) -> None:
    body = _claude_code(FAKE_MODEL)
    body["extra_headers"] = {"x-fake-status": "500"}
    with _anthropic(gw) as client, pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(**body)
    assert "output_config" in caught.value.response.headers[IGNORED]


@pytest.mark.parametrize("stream", [False, True])
def test_a_codex_turn_calls_a_namespaced_tool_by_its_own_name(
    gw: Gateway, fake_worker: str, stream: bool
) -> None:
    headers = {"x-fake-tool-call": "multi_agent_v1__spawn"}
    with _openai(gw) as client:
        if stream:
            with client.responses.stream(**_codex(FAKE_MODEL), extra_headers=headers) as events:
                response = events.get_final_response()
        else:
            raw = client.responses.with_raw_response.create(**_codex(FAKE_MODEL), extra_headers=headers)
            response = raw.parse()
            ignored = set(raw.headers[IGNORED].split(","))
            assert ignored == {"tools[2]:web_search", "reasoning.summary", "include"}
            record = worker_record(fake_worker, raw.headers["x-sluicegate-request-id"])
            assert record is not None
            assert [m["role"] for m in record["body"]["messages"]] == ["system", "user"]
            assert record["body"]["messages"][0]["content"] == "codex\n\nperms\n\nenv"
    (call,) = [item for item in response.output if item.type == "function_call"]
    assert (call.name, call.namespace) == ("spawn", "multi_agent_v1")


def test_a_model_that_refuses_hosted_tools_says_which(gw: Gateway) -> None:
    with _openai(gw) as client, pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(**_codex(REFUSING))
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["param"] == "tools[2].type"
    assert "hosted_tools: refuse" in error["message"]
    with _anthropic(gw) as client, pytest.raises(anthropic.BadRequestError):
        client.messages.create(**_claude_code(REFUSING))
    # Without hosted tools the same model serves the turn.
    body = _codex(REFUSING)
    body["tools"] = body["tools"][:2]
    with _openai(gw) as client:
        assert client.responses.create(**body).status == "completed"


def test_a_native_pool_with_native_normalise_gets_the_normalised_bodies(
    gw: Gateway, fake_worker: str
) -> None:
    with _anthropic(gw) as client:
        raw = client.messages.with_raw_response.create(**_claude_code(NORMALISED))
    assert raw.parse().content
    record = worker_record(fake_worker, raw.headers["x-sluicegate-request-id"])
    assert record is not None
    sent = record["body"]
    assert [m["role"] for m in sent["messages"]] == ["user"]
    assert sent["messages"][0]["content"][-1] == {"type": "text", "text": "environment notes"}
    assert sent["output_config"] == {"effort": "high"}  # a native worker reads the rest itself

    with _openai(gw) as client:
        raw_response = client.responses.with_raw_response.create(**_codex(NORMALISED))
    assert raw_response.parse().status == "completed"
    assert raw_response.headers[IGNORED] == "tools[2]:web_search"
    record = worker_record(fake_worker, raw_response.headers["x-sluicegate-request-id"])
    assert record is not None
    assert [t["name"] for t in record["body"]["tools"]] == ["shell", "multi_agent_v1__spawn"]


def test_the_fake_worker_takes_a_system_message_anywhere_as_vllm_does(fake_worker: str) -> None:
    body = {
        "model": FAKE_MODEL,
        "max_tokens": 4,
        "messages": [
            {"role": "user", "content": "one two"},
            {"role": "system", "content": [{"type": "text", "text": "three"}]},
        ],
    }
    reply = post(f"{fake_worker}/v1/messages", body)
    assert reply.status == 200, reply.body
    assert json.loads(reply.body)["usage"]["input_tokens"] == 3  # the system words count too
    reply = post(f"{fake_worker}/v1/messages", {**body, "messages": [{"role": "critic", "content": "x"}]})
    assert reply.status == 400
