"""Engine-side priority on the REAL vLLM, which workers/vllm/serve.sh starts with
`--scheduling-policy priority`: a batch line's worker body as the gateway makes it
(gateway/proxy/translation/engine_priority.py), sent with the gateway's own worker client, is
served; vLLM answers 400 to any non-zero priority on a server without that policy, so the 200 is
the proof the flag took. Interactive requests through the gateway to the same model still pass,
with no priority a client could choose."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator
from typing import Any

import aiohttp
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


def waiting_in(vllm_url: str) -> float:
    """vllm:num_requests_waiting from the engine's /metrics (the sum of its series)."""
    with urllib.request.urlopen(f"{vllm_url}/metrics", timeout=10) as reply:  # noqa: S310 -- loopback
        text = reply.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:num_requests_waiting") and not line.startswith("#")
    )


def test_an_interactive_request_overtakes_batch_lines_waiting_in_the_engine(
    vllm_url: str, model: ModelConfig
) -> None:
    """Batch lines with the gateway's priority fill the engine's waiting queue (long prompts: the
    scheduler admits a few per step); an interactive request and a late batch line, alike in every
    other way, are sent together once lines wait. Proved by the order the answers finished in:
    the interactive one before the late line, and before most of the lines that were waiting when
    it came (under first come, first served it would follow all of them)."""
    prompt = "weather " * 1500  # ~1,500 tokens each: a step's token budget takes a few
    shape = {"model": SERVED_NAME, "max_tokens": 16, "ignore_eos": True, "temperature": 0}
    lines = 48

    def body(text: str, *, background: bool) -> dict[str, Any]:
        chat = {**shape, "messages": [{"role": "user", "content": f"{text} {prompt}"}]}
        return with_engine_priority(chat, model, background=background)

    finished: list[str] = []
    waiting_when_sent: list[float] = []

    async def ask(session: aiohttp.ClientSession, name: str, payload: dict[str, Any]) -> None:
        async with session.post(f"{vllm_url}/v1/chat/completions", json=payload) as reply:
            answer = await reply.json()
            assert reply.status == 200, answer
        assert answer["usage"]["completion_tokens"] == 16
        finished.append(name)

    async def run() -> None:
        timeout = aiohttp.ClientTimeout(total=600)
        async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
            batch = [
                asyncio.ensure_future(ask(session, f"line-{n}", body(f"line {n}", background=True)))
                for n in range(lines)
            ]
            while (waiting := await asyncio.to_thread(waiting_in, vllm_url)) < 8:
                assert not all(task.done() for task in batch), "the lines never waited in the engine"
                await asyncio.sleep(0.05)
            waiting_when_sent.append(waiting)
            late = [
                asyncio.ensure_future(ask(session, "interactive", body("interactive", background=False))),
                asyncio.ensure_future(ask(session, "late-line", body("late line", background=True))),
            ]
            await asyncio.gather(*batch, *late)

    asyncio.run(run())
    assert sorted(finished) == sorted(["interactive", "late-line", *(f"line-{n}" for n in range(lines))])
    position = finished.index("interactive")
    after = len(finished) - position - 1
    waiting = waiting_when_sent[0]
    print(
        f"engine waiting when sent: {waiting:.0f}; finished after the interactive request: {after}; "
        f"order: {finished}"
    )
    assert position < finished.index("late-line")
    assert after >= waiting / 2, (waiting, finished)
