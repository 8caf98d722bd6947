"""Prometheus metrics, one registry per app (so tests and several apps in one process never mix).

Labels stay low-cardinality: model (a configured name, never a client's arbitrary string), team,
status code, reason. Never a key, key id or user: per-key usage lives in Redis metering.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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

UNKNOWN_MODEL = "unknown"


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "sluicegate_requests_total",
            "API requests answered, by model, team and HTTP status code.",
            ["model", "team", "code"],
            registry=r,
        )
        self.request_duration = Histogram(
            "sluicegate_request_duration_seconds",
            "Time from request to the last byte sent to the client.",
            ["model"],
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.time_to_first_token = Histogram(
            "sluicegate_time_to_first_token_seconds",
            "Time from request to the first generated token relayed to the client (streams).",
            ["model"],
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        self.time_per_output_token = Histogram(
            "sluicegate_time_per_output_token_seconds",
            "Mean time between generated tokens after the first, per stream.",
            ["model"],
            buckets=_TPOT_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "sluicegate_tokens_total",
            "Tokens metered, by model, team and type (prompt or completion).",
            ["model", "team", "type"],
            registry=r,
        )
        self.upstream_errors = Counter(
            "sluicegate_upstream_errors_total",
            "Failures talking to workers, by model and reason.",
            ["model", "reason"],
            registry=r,
        )
        self.rate_limited = Counter(
            "sluicegate_rate_limited_total",
            "Requests refused by a rate limit.",
            ["model", "team"],
            registry=r,
        )
        self.inflight = Gauge(
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
