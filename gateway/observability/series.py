"""The per-request series (one request touches half a dozen) as prometheus_client custom
collectors: plain values the event loop updates, exposed through the documented `Collector` API
and metric families (no private attribute of prometheus_client: no seam, no pin).

prometheus_client's own `inc` and `observe` make two observability-check calls and take a lock per
update, and `observe` finds a histogram's bucket with a Python loop over its bounds. Here a child
is a slot or two: `inc` adds to a float, `observe` finds its bucket by bisection. Every update
happens on the event loop's thread; a scrape reads the values as they stand (as prometheus_client
does, a histogram's buckets and sum are read one after another). The exposition is what the stock
classes expose for the same updates (tests/observability/test_metrics_lean.py), less the
`*_created` series the gateway's registry drops anyway.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


class GaugeChild(CounterChild):
    __slots__ = ()

    def dec(self, amount: float = 1) -> None:
        self.value -= amount


class HistogramChild:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds  # ends with +Inf
        self.counts = [0] * len(bounds)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        self.sum += amount
        # The first bound >= amount, as the stock loop's `amount <= bound` (the last is +Inf).
        self.counts[bisect_left(self.bounds, amount)] += 1


ChildT = TypeVar("ChildT", CounterChild, GaugeChild, HistogramChild)


class _Series(Collector, Generic[ChildT]):
    """One labelled series, registered on `registry` as a collector of its own."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry):
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], ChildT] = {}
        registry.register(self)

    def labels(self, *values: str) -> ChildT:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, not {values}")
        key = tuple(str(value) for value in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._new_child()
        return child

    def _new_child(self) -> ChildT:
        raise NotImplementedError

    def _family(self) -> Metric:
        raise NotImplementedError

    def describe(self) -> Iterable[Metric]:
        return [self._family()]


class CounterSeries(_Series[CounterChild]):
    def _new_child(self) -> CounterChild:
        return CounterChild()

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterable[Metric]:
        family = self._family()
        for values, child in list(self._children.items()):
            family.add_metric(values, child.value)
        return [family]


class GaugeSeries(_Series[GaugeChild]):
    def _new_child(self) -> GaugeChild:
        return GaugeChild()

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterable[Metric]:
        family = self._family()
        for values, child in list(self._children.items()):
            family.add_metric(values, child.value)
        return [family]


class HistogramSeries(_Series[HistogramChild]):
    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry,
        buckets: Sequence[float],
    ) -> None:
        self.bounds = (*(float(b) for b in buckets), float("inf"))
        # The `le` labels as prometheus_client writes them (Go's float format: 1.0, 0.005, +Inf).
        self._les = tuple("+Inf" if b == float("inf") else repr(b) for b in self.bounds)
        super().__init__(name, documentation, labelnames, registry)

    def _new_child(self) -> HistogramChild:
        return HistogramChild(self.bounds)

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterable[Metric]:
        family = self._family()
        for values, child in list(self._children.items()):
            cumulative, buckets = 0.0, []
            for le, count in zip(self._les, child.counts, strict=True):
                cumulative += count
                buckets.append((le, cumulative))
            family.add_metric(list(values), buckets, child.sum)
        return [family]
