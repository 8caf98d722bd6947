"""An OpenAI body reaches the worker through an allow-list (gateway/proxy/translation/engine_fields.py):
the API's own fields, the contract's `ignore_eos`, and the engine extras the model's file admits by
name. Any other field is dropped and named (x-sluicegate-ignored, the counter), or refused with a
400 naming it where the answer would mean something else without it. Logprob counts are capped
per model; `max_tokens: 0` is a 400 on chat and completions as on every other API.

A real gateway in front of the fake worker, which records each body it got."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gateway.model_table import NATIVE, ModelConfig, ModelTable, Protocols
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory, default_table, worker_record
from tests.http import post
from tests.pipeline.support import metric_sum

ADMITTING = "admitting-model"
NATIVE_MODEL = "native-responses-model"
IGNORED = "x-sluicegate-ignored"
CHAT = ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
COMPLETIONS = ("/v1/completions", {"prompt": "hi"})


@pytest.fixture(scope="module")
def gw(make_gateway_module: GatewayFactory, fake_worker: str) -> Iterator[Gateway]:
    admitting = ModelConfig(
        name=ADMITTING,
        upstream_model=FAKE_MODEL,
        endpoints=(fake_worker,),
        engine_fields=frozenset({"min_p", "guided_json", "prompt_logprobs"}),
        max_logprobs=20,
    )
    native = ModelConfig(
        name=NATIVE_MODEL,
        upstream_model=FAKE_MODEL,
        endpoints=(fake_worker,),
        protocols=Protocols(responses=NATIVE),
    )
    table = ModelTable((*default_table(fake_worker).models, admitting, native))
    with make_gateway_module(table) as gateway:
        yield gateway


def _send(gw: Gateway, path: str, body: dict[str, Any], model: str = FAKE_MODEL) -> Any:
    return post(f"{gw.url}{path}", {"model": model, **body}, key=gw.new_key()["key"])


def _worker_body(fake_worker: str, reply: Any) -> dict[str, Any]:
    record = worker_record(fake_worker, reply.headers["x-request-id"])
    assert record is not None
    body: dict[str, Any] = record["body"]
    return body


@pytest.mark.parametrize(("path", "body"), [CHAT, COMPLETIONS])
def test_engine_extras_are_dropped_and_named(
    gw: Gateway, fake_worker: str, path: str, body: dict[str, Any]
) -> None:
    before = metric_sum(gw, "sluicegate_ignored_fields_total", field="min_tokens") or 0
    extras = {"min_tokens": 50, "vllm_xargs": {"a": 1}, "a_future_engine_field": True}
    reply = _send(gw, path, {**body, **extras, "ignore_eos": True, "temperature": 0.5})
    assert reply.status == 200, reply.body
    assert reply.headers[IGNORED] == "a_future_engine_field,min_tokens,vllm_xargs"
    sent = _worker_body(fake_worker, reply)
    assert not set(extras) & set(sent), sent
    # The API's own fields and the contract's extra still reach the worker.
    assert sent["ignore_eos"] is True
    assert sent["temperature"] == 0.5
    assert metric_sum(gw, "sluicegate_ignored_fields_total", field="min_tokens") == before + 1


def test_a_request_naming_only_allowed_fields_is_not_marked(gw: Gateway) -> None:
    reply = _send(gw, CHAT[0], {**CHAT[1], "top_p": 0.9, "seed": 3, "logprobs": True, "top_logprobs": 5})
    assert reply.status == 200, reply.body
    assert IGNORED not in reply.headers


@pytest.mark.parametrize("field", ["guided_json", "chat_template", "logits_processors", "prompt_logprobs"])
def test_a_field_whose_loss_changes_the_answer_is_refused_by_name(gw: Gateway, field: str) -> None:
    reply = _send(gw, CHAT[0], {**CHAT[1], field: {"x": 1} if field == "guided_json" else 1})
    assert reply.status == 400, reply.body
    error = reply.json()["error"]
    assert error["param"] == field
    assert field in error["message"]


def test_a_model_admits_engine_fields_by_name(gw: Gateway, fake_worker: str) -> None:
    extras = {"min_p": 0.1, "guided_json": {"type": "object"}, "prompt_logprobs": 3}
    reply = _send(gw, CHAT[0], {**CHAT[1], **extras, "top_k": 4}, model=ADMITTING)
    assert reply.status == 200, reply.body
    assert reply.headers[IGNORED] == "top_k"  # not among the ones this model admits
    sent = _worker_body(fake_worker, reply)
    assert {name: sent.get(name) for name in extras} == extras
    assert "top_k" not in sent


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        ("/v1/chat/completions", "top_logprobs", 6),
        ("/v1/chat/completions", "top_logprobs", -1),
        ("/v1/completions", "logprobs", 6),
        ("/v1/completions", "logprobs", -1),  # vLLM: the whole vocabulary
    ],
)
def test_logprob_counts_are_capped_by_default(gw: Gateway, path: str, field: str, value: int) -> None:
    body = CHAT[1] if path == CHAT[0] else COMPLETIONS[1]
    reply = _send(
        gw,
        path,
        {**body, field: value, "logprobs": True} if field == "top_logprobs" else {**body, field: value},
    )
    assert reply.status == 400, reply.body
    assert reply.json()["error"]["param"] == field
    assert "from 0 to 5" in reply.json()["error"]["message"]


def test_a_model_may_raise_the_logprob_cap(gw: Gateway, fake_worker: str) -> None:
    reply = _send(
        gw, CHAT[0], {**CHAT[1], "logprobs": True, "top_logprobs": 20, "prompt_logprobs": 20}, model=ADMITTING
    )
    assert reply.status == 200, reply.body
    assert _worker_body(fake_worker, reply)["top_logprobs"] == 20
    refused = _send(gw, CHAT[0], {**CHAT[1], "prompt_logprobs": 21}, model=ADMITTING)
    assert refused.status == 400, refused.body
    assert refused.json()["error"]["param"] == "prompt_logprobs"


@pytest.mark.parametrize(("path", "body"), [CHAT, COMPLETIONS])
@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_zero_is_a_400(gw: Gateway, path: str, body: dict[str, Any], field: str) -> None:
    reply = _send(gw, path, {**body, field: 0})
    assert reply.status == 400, reply.body
    # The gateway's own refusal, before admission: not the worker's (the fake refuses some zeros).
    assert reply.json()["error"]["code"] == "invalid_request"
    assert reply.json()["error"]["param"] == field


def test_a_native_responses_bodys_logprobs_are_capped_too(gw: Gateway) -> None:
    body = {"input": "hi", "max_output_tokens": 5}
    refused = _send(gw, "/v1/responses", {**body, "top_logprobs": 6}, model=NATIVE_MODEL)
    assert refused.status == 400, refused.body
    assert refused.json()["error"]["param"] == "top_logprobs"
    assert _send(gw, "/v1/responses", {**body, "top_logprobs": 2}, model=NATIVE_MODEL).status == 200
