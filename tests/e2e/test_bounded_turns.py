"""Limits bound a turn instead of refusing it (gateway/limits/output.py): through a real gateway, a
real Redis, the real SDKs and the fake worker (which records every body it got), a cap larger than
a token limit, a budget, the model's output or context allowance is lowered to what fits, the
worker gets exactly that cap, the client is told in a header, and usage is metered as the worker
reported. A request without a cap reaches the worker with the default one."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import orjson
import pytest

from gateway.apis.openai.dialect import CHAT
from gateway.limits.output import LIMITED_BY_HEADER, MAX_TOKENS_HEADER, estimated_prompt_bound
from gateway.model_table import NATIVE, ModelConfig, ModelTable, Protocols
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory, default_table, worker_record
from tests.http import Reply, post
from tests.pipeline.support import wait_requests_metered
from tests.servers import run_uvicorn
from tests.waiting import wait_until
from workers.fake.app import create_app as create_fake_worker

CAPPED, WINDOWED, COUNTED, NATIVE_MODEL, REPORTED, EXPLICIT = (
    "capped",
    "windowed",
    "counted",
    "native-model",
    "reported",
    "explicit",
)
WINDOW = 3000
REPORTED_LEN = 2048


@pytest.fixture(scope="module")
def short_worker() -> Iterator[str]:
    """A worker whose /v1/models reports a 2048-token context, as vLLM's does."""
    with run_uvicorn(create_fake_worker([FAKE_MODEL], max_model_len=REPORTED_LEN)) as url:
        yield url


@pytest.fixture(scope="module")
def gw(make_gateway_module: GatewayFactory, fake_worker: str, short_worker: str) -> Iterator[Gateway]:
    def model(name: str, url: str = fake_worker, **fields: Any) -> ModelConfig:
        return ModelConfig(name=name, upstream_model=FAKE_MODEL, endpoints=(url,), **fields)

    models = (
        model(CAPPED, max_output_tokens=50, default_max_tokens=200),
        model(WINDOWED, context_window=WINDOW),
        model(COUNTED, context_window=WINDOW, tokenize=True),
        model(NATIVE_MODEL, protocols=Protocols(messages=NATIVE, responses=NATIVE)),
        model(REPORTED, short_worker),
        model(EXPLICIT, short_worker, context_window=100_000),
    )
    with make_gateway_module(ModelTable((*default_table(fake_worker).models, *models))) as gateway:
        yield gateway


def _chat(gw: Gateway, key: str, model: str, *, words: int = 1, **fields: Any) -> Reply:
    body = {"model": model, "messages": [{"role": "user", "content": "word " * words}], **fields}
    return post(f"{gw.url}/v1/chat/completions", body, key=key, headers={"x-fake-tokens": "5"})


def _worker_got(worker: str, reply_headers: Any, field: str = "max_tokens") -> Any:
    record = worker_record(worker, reply_headers["x-request-id"])
    assert record is not None, "the worker never got the request"
    return record["body"].get(field)


def test_a_claude_code_turn_under_a_30000_tpm_key_is_admitted_with_the_cap_that_fits(
    gw: Gateway, fake_worker: str
) -> None:
    """Claude Code sends max_tokens 32000 with a ~19k-token prompt: 51k reserved, far more than
    a 30,000 tokens/minute key allows at once. Admitted with what the minute has left."""
    key = gw.new_key(tpm=30_000)
    prompt = "word " * 15_000  # ~75 KB: ~19k tokens by the gateway's estimate
    with anthropic.Anthropic(base_url=gw.url, api_key=key["key"], max_retries=0) as client:
        raw = client.messages.with_raw_response.create(
            model=FAKE_MODEL,
            max_tokens=32_000,
            messages=[{"role": "user", "content": prompt}],
            extra_headers={"x-fake-tokens": "5"},
            stream=True,  # as Claude Code asks
        )
        told = {}
        for event in raw.parse():
            if event.type == "message_start":
                told["input"] = event.message.usage.input_tokens
            elif event.type == "message_delta":
                told["output"] = event.usage.output_tokens
    granted = int(raw.headers[MAX_TOKENS_HEADER])
    assert raw.headers[LIMITED_BY_HEADER] == "tokens_per_minute"
    assert 10_000 < granted < 12_000, granted  # 30,000 less the ~19k-token estimate
    assert _worker_got(fake_worker, raw.headers) == granted
    totals = wait_requests_metered(gw, key["team"], 1)
    assert (totals["prompt_tokens"], totals["completion_tokens"]) == (told["input"], told["output"])
    assert told["output"] == 5


def test_a_request_without_a_cap_reaches_the_worker_with_the_default(gw: Gateway, fake_worker: str) -> None:
    key = gw.new_key()["key"]
    client = gw.client(key)
    raw = client.chat.completions.with_raw_response.create(
        model=FAKE_MODEL, messages=[{"role": "user", "content": "hi"}]
    )
    assert raw.headers[MAX_TOKENS_HEADER] == str(gw.settings.default_max_tokens)
    assert raw.headers[LIMITED_BY_HEADER] == "default"
    assert _worker_got(fake_worker, raw.headers) == gw.settings.default_max_tokens
    # The cap the client set, as it set it: nothing to tell.
    asked = client.chat.completions.with_raw_response.create(
        model=FAKE_MODEL, messages=[{"role": "user", "content": "hi"}], max_completion_tokens=30
    )
    assert MAX_TOKENS_HEADER not in asked.headers
    assert _worker_got(fake_worker, asked.headers, "max_completion_tokens") == 30


def test_the_models_output_allowance_and_default_bound_the_cap(gw: Gateway, fake_worker: str) -> None:
    key = gw.new_key()["key"]
    over = _chat(gw, key, CAPPED, max_tokens=500)
    assert over.status == 200, over.body
    assert (over.headers[MAX_TOKENS_HEADER], over.headers[LIMITED_BY_HEADER]) == ("50", "max_output_tokens")
    assert _worker_got(fake_worker, over.headers) == 50
    # No cap: the model's default (200), itself above its max_output_tokens.
    unset = _chat(gw, key, CAPPED)
    assert (unset.headers[MAX_TOKENS_HEADER], unset.headers[LIMITED_BY_HEADER]) == ("50", "max_output_tokens")
    under = _chat(gw, key, CAPPED, max_tokens=30)
    assert MAX_TOKENS_HEADER not in under.headers
    assert _worker_got(fake_worker, under.headers) == 30


def _estimate(words: int) -> int:
    body = {"model": "m", "messages": [{"role": "user", "content": "word " * words}]}
    return CHAT.parse(orjson.dumps(body)).estimated_prompt_tokens()


def test_the_context_window_bounds_the_cap_from_the_estimate_with_its_margin(
    gw: Gateway, fake_worker: str
) -> None:
    key = gw.new_key()["key"]
    reply = _chat(gw, key, WINDOWED, words=1000, max_tokens=5000)
    assert reply.status == 200, reply.body
    expected = WINDOW - estimated_prompt_bound(_estimate(1000))
    assert (reply.headers[MAX_TOKENS_HEADER], reply.headers[LIMITED_BY_HEADER]) == (
        str(expected),
        "context_window",
    )
    assert _worker_got(fake_worker, reply.headers) == expected
    far = _chat(gw, key, WINDOWED, words=10, max_tokens=100)
    assert MAX_TOKENS_HEADER not in far.headers


def test_with_tokenize_the_context_clamp_uses_the_workers_own_count(gw: Gateway, fake_worker: str) -> None:
    key = gw.new_key()["key"]
    messages = [{"role": "user", "content": "word " * 1000}]
    counted = post(
        f"{fake_worker}/tokenize",
        {"model": FAKE_MODEL, "messages": messages, "add_generation_prompt": True},
    ).json()["count"]
    reply = _chat(gw, key, COUNTED, words=1000, max_tokens=5000)
    assert reply.status == 200, reply.body
    assert reply.headers[LIMITED_BY_HEADER] == "context_window"
    assert int(reply.headers[MAX_TOKENS_HEADER]) == WINDOW - counted
    assert _worker_got(fake_worker, reply.headers) == WINDOW - counted


def test_the_window_is_read_from_the_workers_max_model_len_unless_the_model_sets_one(
    gw: Gateway, short_worker: str
) -> None:
    key = gw.new_key()["key"]
    replies: list[Reply] = []

    def clamped() -> bool:
        replies.append(_chat(gw, key, REPORTED, max_tokens=100_000))
        return LIMITED_BY_HEADER in replies[-1].headers

    # The monitor reads /v1/models with an endpoint's first probe, at start.
    wait_until(clamped, 10, "the gateway never used the worker's max_model_len")
    reply = replies[-1]
    assert reply.headers[LIMITED_BY_HEADER] == "context_window"
    assert int(reply.headers[MAX_TOKENS_HEADER]) == REPORTED_LEN - estimated_prompt_bound(_estimate(1))
    assert _worker_got(short_worker, reply.headers) == int(reply.headers[MAX_TOKENS_HEADER])
    explicit = _chat(gw, key, EXPLICIT, max_tokens=150_000)
    assert int(explicit.headers[MAX_TOKENS_HEADER]) == 100_000 - estimated_prompt_bound(_estimate(1))


def test_native_apis_get_the_cap_in_their_own_field(gw: Gateway, fake_worker: str) -> None:
    key = gw.new_key(tpm=2_000)
    with anthropic.Anthropic(base_url=gw.url, api_key=key["key"], max_retries=0) as client:
        raw = client.messages.with_raw_response.create(
            model=NATIVE_MODEL, max_tokens=32_000, messages=[{"role": "user", "content": "hi"}], timeout=60
        )
    granted = int(raw.headers[MAX_TOKENS_HEADER])
    assert granted < 2_000
    assert _worker_got(fake_worker, raw.headers) == granted
    other = gw.new_key(tpm=2_000)
    with openai.OpenAI(base_url=f"{gw.url}/v1", api_key=other["key"], max_retries=0) as oai:
        response = oai.responses.with_raw_response.create(
            model=NATIVE_MODEL, input="hi", max_output_tokens=32_000
        )
    granted = int(response.headers[MAX_TOKENS_HEADER])
    assert response.headers[LIMITED_BY_HEADER] == "tokens_per_minute"
    assert _worker_got(fake_worker, response.headers, "max_output_tokens") == granted


def test_concurrent_requests_without_a_cap_cannot_overrun_the_budget(gw: Gateway, fake_worker: str) -> None:
    """The hole found in review: each reserved the default but reached the worker uncapped, so
    20 at once spent 2.85x the team's day. Now each gets the cap it reserved."""
    team = gw.new_team()
    budget = 3_000
    gw.admin.call("PATCH", f"/admin/v1/teams/{team}", {"daily_tokens": budget})
    key = gw.new_key(team=team)["key"]
    body = {"model": CAPPED, "messages": [{"role": "user", "content": "hi"}]}

    def one(_: int) -> Reply:
        # The worker would write 1000 tokens if let.
        return post(f"{gw.url}/v1/chat/completions", body, key=key, headers={"x-fake-tokens": "1000"})

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        replies = list(pool.map(one, range(20)))
    served = [r for r in replies if r.status == 200]
    assert served, [r.status for r in replies]
    assert all(_worker_got(fake_worker, r.headers) == 50 for r in served)
    totals = wait_requests_metered(gw, team, len(served))
    reservation = _estimate(1) + 50
    assert totals["prompt_tokens"] + totals["completion_tokens"] <= budget + reservation, totals
