"""prefix_affinity in front of two REAL vLLMs: the engines' own prefix-cache hit rate reaches 85 %
of an oracle that always picks the right engine (least_loaded's is printed beside it). Hit rates
are the engines' token counters, not timings; TTFT is bench/prefix_vllm_bench.py's to report."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest

from gateway.model_table import ModelConfig, ModelTable, RoutingConfig
from tests.conftest import GatewayFactory
from tests.http import post
from tests.vllm.prefix_workload import MAX_TOKENS, SERVED_NAME, Oracle, hit_rate, run_workload, two_vllms


@pytest.fixture(scope="module")
def engines() -> Iterator[list[str]]:
    with two_vllms() as urls:
        yield urls


def _ask(url: str, messages: list[dict[str, str]], key: str | None = None) -> str:
    body = {"model": SERVED_NAME, "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0}
    reply = post(f"{url}/v1/chat/completions", body, key=key, timeout=120)
    assert reply.status == 200, reply.body[:300]
    content = orjson.loads(reply.body)["choices"][0]["message"]["content"]
    return str(content or "")


def _through_gateway(make_gateway: GatewayFactory, urls: list[str], policy: str, salt: str) -> float:
    table = ModelTable(
        (ModelConfig(name=SERVED_NAME, endpoints=tuple(urls), routing=RoutingConfig(policy=policy)),)
    )
    with make_gateway(table, prefix_share_interval_s=0) as gw:
        key = gw.new_key()["key"]
        return hit_rate(urls, lambda: run_workload(lambda _name, messages: _ask(gw.url, messages, key), salt))


def test_prefix_affinity_gets_85_percent_of_the_oracles_cache_hits(
    make_gateway: GatewayFactory, engines: list[str]
) -> None:
    oracle = Oracle(engines)
    best = hit_rate(engines, lambda: run_workload(lambda n, m: _ask(oracle.pick(n, m), m), "oracle"))
    least = _through_gateway(make_gateway, engines, "least_loaded", "least-loaded")
    prefix = _through_gateway(make_gateway, engines, "prefix_affinity", "prefix")
    rates = f"oracle {best:.3f}, prefix_affinity {prefix:.3f}, least_loaded {least:.3f}"
    print(f"engine prefix-cache hit rate: {rates}")
    assert best > 0.3, f"the workload does not exercise the cache (oracle hit rate {best:.3f})"
    assert prefix >= 0.85 * best, (prefix, best, least)
