"""Prometheus metrics, one registry per app (so tests and several apps in one process never mix).

Labels stay low-cardinality: model (a configured name, never a client's arbitrary string), team,
api (a dialect's name, fixed in the code), status code, reason, the kind and scope of a refusing
limit, and for routing a pool name and an endpoint's address. Never a key, key id or user: per-key
usage lives in Redis metering.

The registry also carries the standard process_*, python_gc_* and python_info series, and drops
every `*_created` series (see NoCreatedRegistry).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any, Protocol, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.metrics_core import Metric

from gateway.observability.series import CounterSeries, GaugeSeries, HistogramSeries
from gateway.pricing import Price

# LLM requests run from milliseconds (a 429) to many minutes (a long generation).
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 10, 20, 40, 80)
_TPOT_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    1,
    2.5,
)

# A routing decision is microseconds; a queue wait is up to the pool's max_queue_wait.
_DECISION_BUCKETS = (1e-6, 2.5e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2.5e-4, 1e-3)
_QUEUE_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# Signed: a queue wait's actual minus estimated seconds (negative: the estimate was too long).
_ESTIMATE_ERROR_BUCKETS = (-30, -10, -5, -2, -1, -0.5, -0.1, -0.01, 0.01, 0.1, 0.5, 1, 2, 5, 10, 30)

UNKNOWN_MODEL = "unknown"
ChildT = TypeVar("ChildT", covariant=True)
_WITH_CREATED = ("counter", "histogram", "summary")


class Labelled(Protocol[ChildT]):
    """A labelled series: prometheus_client's classes, and the per-request ones (series.py)."""

    def labels(self, *values: str) -> ChildT: ...


class NoCreatedRegistry(CollectorRegistry):
    """A registry that never exposes `*_created` series: one extra series per counter and
    histogram child, saying when it was first touched, which Prometheus does not need (it finds
    counter resets itself) and which doubles the series of every counter.

    prometheus_client's own switches (disable_created_metrics(), PROMETHEUS_DISABLE_CREATED_SERIES)
    are process-global and read at import time; this keeps the choice on the app's own registry,
    so another registry in the same process (a worker, a test) is left as it is."""

    def collect(self) -> Iterable[Metric]:
        for metric in super().collect():
            if metric.type not in _WITH_CREATED:
                yield metric
                continue
            created = metric.name + "_created"
            kept = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            kept.samples = [sample for sample in metric.samples if sample.name != created]
            yield kept


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        """`registry`: default a fresh NoCreatedRegistry; one passed in is used as it is."""
        self.registry = NoCreatedRegistry() if registry is None else registry
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        r = self.registry
        self.requests = CounterSeries(
            "sluicegate_requests_total",
            "API requests answered, by model, team, client API (chat, completions, embeddings, "
            "messages, responses, models) and HTTP status code.",
            ["model", "team", "api", "code"],
            registry=r,
        )
        self.request_duration = HistogramSeries(
            "sluicegate_request_duration_seconds",
            "Time from request to the last byte sent to the client.",
            ["model"],
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.time_to_first_token = HistogramSeries(
            "sluicegate_time_to_first_token_seconds",
            "Time from request to the first generated token relayed to the client (streams).",
            ["model"],
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        self.time_per_output_token = HistogramSeries(
            "sluicegate_time_per_output_token_seconds",
            "Mean time between generated tokens after the first, per stream.",
            ["model"],
            buckets=_TPOT_BUCKETS,
            registry=r,
        )
        self.tokens = CounterSeries(
            "sluicegate_tokens_total",
            "Tokens metered, by model, team and type (prompt or completion).",
            ["model", "team", "type"],
            registry=r,
        )
        # The model table's prices, so that a dashboard prices sluicegate_tokens_total with a join
        # instead of a copy of the prices that would drift from the table (price_changed).
        self.model_price = Gauge(
            "sluicegate_model_price_per_token",
            "The configured price of one token of a model (its `price` per million, over 10^6), by "
            "model, type (prompt or completion, as in sluicegate_tokens_total) and currency; only "
            "priced models. A float: the usage report's costs are the exact decimals.",
            ["model", "type", "currency"],
            registry=r,
        )
        self.upstream_errors = CounterSeries(
            "sluicegate_upstream_errors_total",
            "Failures talking to workers, by model and reason.",
            ["model", "reason"],
            registry=r,
        )
        self.rate_limited = Counter(
            "sluicegate_rate_limited_total",
            "Requests refused by a limit, by model, team, the limit's kind (`limit`: rpm, tpm, "
            "concurrency or budget) and whose limit it was (`scope`: key or team).",
            ["model", "team", "limit", "scope"],
            registry=r,
        )
        self.inflight = GaugeSeries(
            "sluicegate_inflight_requests",
            "Requests currently being answered by a worker.",
            ["model"],
            registry=r,
        )
        self.admitted_without_limits = Counter(
            "sluicegate_admitted_without_limits_total",
            "Requests admitted unchecked because Redis was unreachable (fail_open mode).",
            registry=r,
        )
        self.metering_failures = Counter(
            "sluicegate_metering_failures_total",
            "Usage writes to Redis that failed (the records stay queued and are retried).",
            registry=r,
        )
        self.buffered_answer_bytes = Gauge(
            "sluicegate_buffered_answer_bytes",
            "Bytes of whole (non-streamed) answers this replica holds now, all requests together "
            "(bounded by SLUICEGATE_MAX_BUFFERED_ANSWER_BYTES).",
            registry=r,
        )
        self.metering_pending = Gauge(
            "sluicegate_metering_pending",
            "Usage records waiting to be written to Redis.",
            registry=r,
        )
        self.metering_dropped = Counter(
            "sluicegate_metering_dropped_total",
            "Usage records dropped because the pending queue was full.",
            registry=r,
        )
        self._routing_metrics(r)
        # The standard series every Prometheus client exports by default (CPU, memory, open file
        # descriptors, start time; GC; the Python version), here on the app's own registry.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)

    def _routing_metrics(self, r: CollectorRegistry) -> None:
        self.pool_healthy_endpoints = Gauge(
            "sluicegate_pool_healthy_endpoints",
            "Endpoints of the pool that take requests now (confirmed, not ejected, probe passing).",
            ["pool"],
            registry=r,
        )
        self.pool_endpoints = Gauge(
            "sluicegate_pool_endpoints",
            "Endpoints of the pool by state (pending, healthy, ejected, unhealthy).",
            ["pool", "state"],
            registry=r,
        )
        self.endpoint_ejections = Counter(
            "sluicegate_endpoint_ejections_total",
            "Times an endpoint was ejected after failures in a row (or after a failed trial request).",
            ["pool", "endpoint"],
            registry=r,
        )
        self.endpoint_inflight = Gauge(
            "sluicegate_endpoint_inflight",
            "Requests this replica has in flight on the endpoint.",
            ["pool", "endpoint"],
            registry=r,
        )
        self.upstream_retries = Counter(
            "sluicegate_upstream_retries_total",
            "Requests retried on another endpoint of the pool before anything reached the client.",
            ["pool"],
            registry=r,
        )
        self.fallbacks = Counter(
            "sluicegate_fallbacks_total",
            "Requests sent on to a fallback model because the model's pools had no healthy endpoint "
            "or failed before the first byte.",
            ["model", "fallback"],
            registry=r,
        )
        self.ignored_fields = Counter(
            "sluicegate_ignored_fields_total",
            "Parts of a client's request the translation to the worker dropped (a field, a hosted "
            "tool, a content block), by client API and field; names it does not know are 'other'.",
            ["api", "field"],
            registry=r,
        )
        self.routing_decision = Histogram(
            "sluicegate_routing_decision_seconds",
            "Time the routing policy took to pick an endpoint.",
            buckets=_DECISION_BUCKETS,
            registry=r,
        )
        self.pool_queue_depth = Gauge(
            "sluicegate_pool_queue_depth",
            "Requests waiting for a free endpoint slot in the pool (what autoscaling should scale on).",
            ["pool"],
            registry=r,
        )
        self.queue_wait_seconds = Histogram(
            "sluicegate_queue_wait_seconds",
            "Time requests that had to queue waited for a slot (served or timed out).",
            ["pool"],
            buckets=_QUEUE_WAIT_BUCKETS,
            registry=r,
        )
        self.discovery_up = Gauge(
            "sluicegate_discovery_up",
            "0 while Kubernetes discovery is not connected or a watch is failing (the endpoints in use "
            "may be stale), else 1 (also when no model comes from Kubernetes).",
            registry=r,
        )
        self.redis_up = Gauge(
            "sluicegate_redis_up",
            "1 while this replica's last background PING of Redis succeeded, else 0.",
            registry=r,
        )
        self.queue_rejections = Counter(
            "sluicegate_queue_rejections_total",
            "Requests refused by a saturated pool: its queue was full, or the wait timed out.",
            ["pool", "reason"],
            registry=r,
        )
        self._fair_share_metrics(r)
        self._deadline_metrics(r)
        self._files_metrics(r)
        self.prefix_routing = Counter(
            "sluicegate_prefix_routing_total",
            "prefix_affinity decisions: hit (an endpoint with the longest cached prefix), miss (none "
            "had any; least_loaded), saturated (the cached one was too loaded; least_loaded).",
            ["pool", "outcome"],
            registry=r,
        )
        self.prefix_index_blocks = Gauge(
            "sluicegate_prefix_index_blocks",
            "Prompt blocks in this replica's prefix index (bounded by SLUICEGATE_PREFIX_INDEX_BLOCKS).",
            registry=r,
        )
        self.prefix_share_failures = Counter(
            "sluicegate_prefix_share_failures_total",
            "Prefix index syncs with Redis that failed (routing goes on with the local index).",
            registry=r,
        )

    def _fair_share_metrics(self, r: CollectorRegistry) -> None:
        # Team labels, as sluicegate_requests_total has: teams are created by an admin, so bounded.
        self.fair_share_service = Gauge(
            "sluicegate_fair_share_service_tokens",
            "A waiting team's weighted service in the pool's token fair share, (input + 2 x output "
            "tokens) / team weight, as this replica last read it from the shared counters.",
            ["pool", "team"],
            registry=r,
        )
        self.fair_share_backlog = Gauge(
            "sluicegate_fair_share_backlog",
            "Requests of the team waiting in this replica's queue for the pool (tokens fairness).",
            ["pool", "team"],
            registry=r,
        )
        self.fair_share_jain = Gauge(
            "sluicegate_fair_share_jain_index",
            "Jain's fairness index of the weighted service the waiting teams got over the pool's last "
            "512 settled requests on this replica: 1 is an even split by weight, 1/n one team taking all.",
            ["pool"],
            registry=r,
        )
        self.fair_share_fallbacks = Counter(
            "sluicegate_fair_share_fallbacks_total",
            "Fair-share decisions (op=pick) or counter updates (op=update) made without Redis, which was "
            "unreachable or slow: the pool went on with this replica's own counters.",
            ["pool", "op"],
            registry=r,
        )

    def _deadline_metrics(self, r: CollectorRegistry) -> None:
        """gateway/routing/deadline.py."""
        self.deadline_refusals = Counter(
            "sluicegate_deadline_refusals_total",
            "Requests refused with deadline_unreachable: their first token could not come before their "
            "deadline (stage=arrival: on joining the pool's queue; queued: while waiting in it).",
            ["pool", "stage"],
            registry=r,
        )
        self.deadline_misses = Counter(
            "sluicegate_deadline_misses_total",
            "Requests with a deadline whose first output came after it.",
            ["pool"],
            registry=r,
        )
        self.deadline_estimate_error = Histogram(
            "sluicegate_deadline_estimate_error_seconds",
            "A queued request's actual wait for a slot minus the wait estimated when it joined the queue "
            "(the estimate deadlines are refused by; negative: it was served sooner than estimated).",
            ["pool"],
            buckets=_ESTIMATE_ERROR_BUCKETS,
            registry=r,
        )
        # Overflow to external providers (gateway/overflow/): providers are the model file's and
        # teams the admin API's, so both labels are bounded.
        self.overflow_requests = Counter(
            "sluicegate_overflow_requests_total",
            "Requests sent to an external overflow provider (provider: <model>/<provider name>), by team "
            "and outcome (served: the provider answered; unavailable: it failed, a 503 to the client).",
            ["provider", "team", "outcome"],
            registry=r,
        )
        self.overflow_refusals = Counter(
            "sluicegate_overflow_refusals_total",
            "Requests a model's pools could not serve in time that did not overflow (reason=denied: the "
            "team or key does not allow it; busy: each provider at max_concurrency or its breaker open).",
            ["model", "reason"],
            registry=r,
        )

    def _files_metrics(self, r: CollectorRegistry) -> None:
        """gateway/files/retention.py."""
        self.files_expired = Counter(
            "sluicegate_files_expired_total",
            "Stored files (uploads, batch outputs) deleted by the retention sweep for being older than "
            "SLUICEGATE_FILES_RETENTION_S, by store kind (directory, s3).",
            ["store"],
            registry=r,
        )

    def price_changed(self, model: str, old: Price | None, new: Price | None) -> None:
        """A model was added, replaced or removed (the Router): its price series follow, and a
        series of a removed price or currency goes."""
        if old is not None:
            for kind in ("prompt", "completion"):
                with contextlib.suppress(KeyError):
                    self.model_price.remove(model, kind, old.currency)
        if new is not None:
            prompt, completion = new.per_token()
            self.model_price.labels(model, "prompt", new.currency).set(prompt)
            self.model_price.labels(model, "completion", new.currency).set(completion)

    def child(self, metric: Labelled[ChildT], *labels: str) -> ChildT:
        """`metric.labels(*labels)`, remembered: prometheus_client checks and locks on every
        `labels()` call, several microseconds each, and a request makes half a dozen. Safe to
        keep: every label set here is bounded (configured models and teams, status codes)."""
        key = (id(metric), labels)
        found: ChildT | None = self._children.get(key)  # Any: no `cast` call per look-up
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found
