"""Engine-side priority on the REAL vLLM, which workers/vllm/serve.sh starts with
`--scheduling-policy priority`: a batch line's worker body as the gateway makes it
(gateway/proxy/translation/engine_priority.py), sent with the gateway's own worker client, is
served; vLLM answers 400 to any non-zero priority on a server without that policy, so the 200 is
the proof the flag took. Interactive requests through the gateway to the same model still pass,
with no priority a client could choose."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import openai
import orjson
import pytest

from gateway.model_table import ModelConfig, ModelTable, Timeouts
from gateway.proxy.translation.engine_priority import BATCH_PRIORITY, with_engine_priority
from gateway.worker.client import WorkerClient
from gateway.worker.http import SmallAnswer
from tests.conftest import Gateway, GatewayFactory
from tests.vllm.conftest import SERVED_NAME

PRIORITISED = "tiny-engine-priority"
LINE: dict[str, Any] = {
    "model": SERVED_NAME,
    "messages": [{"role": "user", "content": "Summarise the weather report."}],
    "max_tokens": 8,
}


@pytest.fixture(scope="module")
def model(vllm_url: str) -> ModelConfig:
    return ModelConfig(
        name=PRIORITISED,
        upstream_model=SERVED_NAME,
        endpoints=(vllm_url,),
        timeouts=Timeouts(first_token=120, idle=60, total=300),
        engine_priority=True,
    )


@pytest.fixture(scope="module")
def gw(make_gateway_module: GatewayFactory, model: ModelConfig) -> Iterator[Gateway]:
    with make_gateway_module(ModelTable((model,))) as gateway:
        yield gateway


def to_worker(vllm_url: str, body: dict[str, Any]) -> SmallAnswer:
    async def send() -> SmallAnswer:
        client = WorkerClient()
        try:
            return await asyncio.wait_for(
                client.fetch(
                    "POST",
                    f"{vllm_url}/v1/chat/completions",
                    orjson.dumps(body),
                    {"content-type": "application/json"},
                    connect_s=5,
                    max_bytes=1 << 20,
                ),
                300,
            )
        finally:
            await client.aclose()

    return asyncio.run(send())


def test_a_batch_line_with_the_gateway_s_priority_is_served(vllm_url: str, model: ModelConfig) -> None:
    body = with_engine_priority(LINE, model, background=True)
    assert body["priority"] == BATCH_PRIORITY
    answer = to_worker(vllm_url, body)
    assert answer.status == 200, answer.body[:500]
    reply = orjson.loads(answer.body)
    assert reply["choices"][0]["finish_reason"] in ("stop", "length")
    assert 1 <= reply["usage"]["completion_tokens"] <= 8


def test_the_engine_reads_the_field(vllm_url: str) -> None:
    # Not an unknown field it ignores: a priority that is no integer is refused.
    answer = to_worker(vllm_url, {**LINE, "priority": "high"})
    assert answer.status == 400, answer.body[:500]
    assert b"priority" in answer.body


def test_interactive_requests_to_the_same_model_still_pass(gw: Gateway) -> None:
    key = gw.new_key()["key"]
    with openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=0) as client:
        whole = client.chat.completions.create(
            model=PRIORITISED,
            messages=LINE["messages"],
            max_tokens=8,
            extra_body={"priority": -100},  # a client's own: dropped before the worker
        )
        streamed = client.chat.completions.create(
            model=PRIORITISED, messages=LINE["messages"], max_tokens=8, stream=True
        )
        chunks = list(streamed)
    assert whole.usage is not None
    assert 1 <= whole.usage.completion_tokens <= 8
    assert any(c.choices and c.choices[0].finish_reason for c in chunks)
