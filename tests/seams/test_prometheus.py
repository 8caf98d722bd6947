"""gateway/seams/prometheus.py against the installed prometheus_client: the private value objects
its per-request classes update are there on a labelled child, and updating them moves the
exposed sample as the stock update does."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gateway.seams import prometheus
from tests.seams.names import assert_present


def test_a_labelled_child_has_the_values_the_lean_updates_reach() -> None:
    registry = CollectorRegistry()
    made = {
        Counter: Counter("c_total", "", ["a"], registry=registry),
        Gauge: Gauge("g", "", ["a"], registry=registry),
        Histogram: Histogram("h_seconds", "", ["a"], buckets=(0.1, 1), registry=registry),
    }
    for kind, names in prometheus.PRIVATES.items():
        assert_present("prometheus-client", made[kind].labels("x"), names)


def test_the_lean_updates_move_what_is_exposed() -> None:
    registry = CollectorRegistry()
    counter = prometheus.PerRequestCounter("c_total", "", ["a"], registry=registry)
    gauge = prometheus.PerRequestGauge("g", "", ["a"], registry=registry)
    histogram = prometheus.PerRequestHistogram("h_seconds", "", ["a"], buckets=(0.1, 1), registry=registry)
    counter.labels("x").inc(2)
    gauge.labels("x").inc(3)
    gauge.labels("x").dec(1)
    histogram.labels("x").observe(0.1)  # on a bound: that bucket
    histogram.labels("x").observe(5)
    sample = registry.get_sample_value
    assert sample("c_total", {"a": "x"}) == 2
    assert sample("g", {"a": "x"}) == 2
    assert sample("h_seconds_bucket", {"a": "x", "le": "0.1"}) == 1
    assert sample("h_seconds_bucket", {"a": "x", "le": "1.0"}) == 1
    assert sample("h_seconds_bucket", {"a": "x", "le": "+Inf"}) == 2
    assert sample("h_seconds_sum", {"a": "x"}) == 5.1
