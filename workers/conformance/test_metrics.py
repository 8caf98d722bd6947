"""MET rules: the load gauges the gateway scrapes, under vLLM's names."""

from __future__ import annotations

import pytest

from workers.conformance import client
from workers.conformance.checks import KV_CACHE, RUNNING, WAITING
from workers.conformance.client import Metrics, Worker
from workers.conformance.rules import rule

RULE_OF = {RUNNING: "MET-2", WAITING: "MET-3", KV_CACHE: "MET-4"}


@pytest.fixture(scope="module")
def metrics(worker: Worker) -> Metrics:
    reply = client.get(worker, "/metrics", timeout_s=10)
    rule("MET-1", reply.status == 200, f"expected GET /metrics to answer 200, saw {reply.brief()}")
    content_type = reply.headers.get("content-type", "")
    rule(
        "MET-1",
        content_type.startswith(("text/plain", "application/openmetrics-text")),
        f"expected the Prometheus text format (text/plain; version=0.0.4), saw {content_type!r}",
    )
    return client.parse_metrics(reply.body.decode("utf-8", "replace"))


@pytest.mark.rules("MET-1")
def test_metrics_parse(metrics: Metrics) -> None:
    rule("MET-1", not metrics.problems, f"expected parseable exposition lines, saw: {metrics.problems[:5]}")


@pytest.mark.rules("MET-2", "MET-3", "MET-5")
@pytest.mark.parametrize("name", [RUNNING, WAITING])
def test_load_gauges(worker: Worker, metrics: Metrics, name: str) -> None:
    rule_id = RULE_OF[name]
    families = sorted({s.name for s in metrics.samples if s.name.startswith("vllm:")})
    rule(
        rule_id,
        any(s.name == name for s in metrics.samples),
        f"expected a {name} series, saw the vllm:* series {families[:20]}",
    )
    kind = metrics.types.get(name)
    rule(rule_id, kind == "gauge", f"expected `# TYPE {name} gauge`, saw type {kind!r}")
    mine = metrics.for_model(name, worker.model)
    labels = [s.labels for s in metrics.samples if s.name == name]
    rule("MET-5", mine, f'expected a {name} sample with model_name="{worker.model}", saw labels {labels}')
    bad = [s.value for s in mine if not client.finite(s.value) or s.value < 0 or s.value != int(s.value)]
    rule(rule_id, not bad, f"expected a whole, non-negative count of requests, saw {bad}")


@pytest.mark.rules("MET-4")
def test_kv_cache_usage_is_a_fraction(worker: Worker, metrics: Metrics) -> None:
    samples = [s for s in metrics.samples if s.name == KV_CACHE]
    if not samples:
        return  # an engine without a KV cache may leave it out
    kind = metrics.types.get(KV_CACHE)
    rule("MET-4", kind == "gauge", f"expected `# TYPE {KV_CACHE} gauge`, saw type {kind!r}")
    bad = [s.value for s in samples if not 0.0 <= s.value <= 1.0]
    rule("MET-4", not bad, f"expected values in [0, 1] (1 = 100 %), saw {bad}")
    mine = metrics.for_model(KV_CACHE, worker.model)
    rule("MET-5", mine, f'expected a {KV_CACHE} sample with model_name="{worker.model}"')
