"""The per-request series (gateway/observability/series.py, custom collectors over plain values)
expose exactly what prometheus_client's stock classes expose for the same updates, and refuse
what the stock classes refuse."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.observability.metrics import Metrics

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# Below, on and between bounds, past the last finite one, and zero.
AMOUNTS = (0.0, 0.001, 0.005, 0.0050001, 0.3, 1, 1.5, 600, 601, 1e9)


def _exposition(registry: CollectorRegistry) -> list[str]:
    return sorted(
        line
        for line in generate_latest(registry).decode().splitlines()
        if not line.startswith("#") and "_created" not in line
    )


def test_lean_updates_expose_what_the_stock_classes_do() -> None:
    ours = Metrics(CollectorRegistry())
    stock = CollectorRegistry()
    requests = Counter("sluicegate_requests_total", "", ["model", "team", "api", "code"], registry=stock)
    duration = Histogram(
        "sluicegate_request_duration_seconds", "", ["model"], buckets=BUCKETS, registry=stock
    )
    inflight = Gauge("sluicegate_inflight_requests", "", ["model"], registry=stock)
    tokens = Counter("sluicegate_tokens_total", "", ["model", "team", "type"], registry=stock)

    for n, amount in enumerate(AMOUNTS):
        labels = ("m", "t", "chat", "200" if n % 3 else "429")
        ours.child(ours.requests, *labels).inc()
        requests.labels(*labels).inc()
        ours.child(ours.request_duration, "m").observe(amount)
        duration.labels("m").observe(amount)
        ours.child(ours.inflight, "m").inc()
        inflight.labels("m").inc()
        if n % 2:
            ours.child(ours.inflight, "m").dec()
            inflight.labels("m").dec()
        ours.child(ours.tokens, "m", "t", "prompt").inc(n * 7)
        tokens.labels("m", "t", "prompt").inc(n * 7)

    names = ("sluicegate_requests", "sluicegate_request_duration", "sluicegate_inflight", "sluicegate_tokens")
    ours_lines = [line for line in _exposition(ours.registry) if line.startswith(names)]
    assert ours_lines == _exposition(stock)
    assert 'sluicegate_request_duration_seconds_bucket{le="0.005",model="m"} 3.0' in ours_lines


def test_a_series_refuses_a_wrong_label_count_and_a_second_registration() -> None:
    ours = Metrics(CollectorRegistry())
    with pytest.raises(ValueError, match="sluicegate_requests_total takes labels"):
        ours.requests.labels("m", "t")
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Metrics(ours.registry)


def test_the_gateways_registry_exposes_the_series_with_no_created_samples() -> None:
    ours = Metrics()
    ours.child(ours.time_to_first_token, "m").observe(0.2)
    ours.child(ours.upstream_errors, "m", "timeout").inc()
    text = generate_latest(ours.registry).decode()
    assert 'sluicegate_time_to_first_token_seconds_bucket{le="0.25",model="m"} 1.0' in text
    assert 'sluicegate_time_to_first_token_seconds_count{model="m"} 1.0' in text
    assert 'sluicegate_upstream_errors_total{model="m",reason="timeout"} 1.0' in text
    assert "# TYPE sluicegate_upstream_errors_total counter" in text
    assert "_created" not in text
