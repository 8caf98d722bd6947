"""The batch engine's series, on the app's registry: lines queued per team (all replicas, read
from Redis), running and done per pool and team (this replica's). Teams are the admin's names and
pools the model table's: bounded."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge


class BatchMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.lines_queued = Gauge(
            "sluicegate_batch_lines_queued",
            "Batch lines waiting to start, every replica's (as Redis holds them), by the pool of "
            "their model and team.",
            ["pool", "team"],
            registry=registry,
        )
        self.lines_running = Gauge(
            "sluicegate_batch_lines_running",
            "Batch lines this replica is running.",
            ["pool", "team"],
            registry=registry,
        )
        self.lines_done = Counter(
            "sluicegate_batch_lines_total",
            "Batch lines this replica ran, by outcome: completed, failed, requeued (never started: "
            "the pool got busy), retried (a worker failure, run again), lost (its lease went to "
            "another replica), error (Redis or the file store failed; run again).",
            ["pool", "team", "outcome"],
            registry=registry,
        )
        self._queued: set[tuple[str, str]] = set()

    def queued(self, lines: Mapping[tuple[str, str], int]) -> None:
        """Every (pool, team) with lines waiting now; the others' series go."""
        for pool, team in self._queued - set(lines):
            self.lines_queued.remove(pool, team)
        for (pool, team), count in lines.items():
            self.lines_queued.labels(pool, team).set(count)
        self._queued = set(lines)

    def running(self, pool: str, team: str, change: int) -> None:
        self.lines_running.labels(pool, team).inc(change)

    def done(self, pool: str, team: str, outcome: str) -> None:
        self.lines_done.labels(pool, team, outcome).inc()
