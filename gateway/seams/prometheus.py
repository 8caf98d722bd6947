"""prometheus_client's internals, used by the per-request series of gateway/observability/metrics.py.
Pinned in pyproject.toml to the minor version tests/seams/test_prometheus.py checked.

What it relies on, and why: a labelled child's value objects, `Counter._value`, `Gauge._value`,
`Histogram._sum`, `Histogram._buckets` and `Histogram._upper_bounds` (each value's `inc` is
prometheus_client's, with its lock). A request touches half a dozen series; the stock `inc` and
`observe` make two observability-check calls per update, and `observe` finds a histogram's
bucket with a Python loop over its bounds. The values, their locks and the exposition stay
prometheus_client's (tests/observability/test_metrics_lean.py compares the exposition with the
stock classes').
"""

from __future__ import annotations

from bisect import bisect_left

from prometheus_client import Counter, Gauge, Histogram

# What tests/seams/test_prometheus.py checks on a labelled child of the installed release.
PRIVATES = {
    Counter: ("_value",),
    Gauge: ("_value",),
    Histogram: ("_sum", "_buckets", "_upper_bounds"),
}


class PerRequestCounter(Counter):
    """The per-request series (one request touches half a dozen): a labelled child's update
    without prometheus_client's two observability-check calls per update, and a histogram's
    bucket found by bisection instead of a Python loop over its bounds. Only ever used through
    `labels()` (Metrics.child), so the check has nothing to catch; the values, their locks and
    the exposition are prometheus_client's (tests/observability/test_metrics_lean.py compares
    the exposition with the stock classes')."""

    def inc(self, amount: float = 1, exemplar: dict[str, str] | None = None) -> None:
        self._value.inc(amount)


class PerRequestGauge(Gauge):
    __doc__ = PerRequestCounter.__doc__

    def inc(self, amount: float = 1) -> None:
        self._value.inc(amount)

    def dec(self, amount: float = 1) -> None:
        self._value.inc(-amount)


class PerRequestHistogram(Histogram):
    __doc__ = PerRequestCounter.__doc__

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        self._sum.inc(amount)
        # The first bound >= amount, as the stock loop's `amount <= bound` (the last is +Inf).
        self._buckets[bisect_left(self._upper_bounds, amount)].inc(1)
