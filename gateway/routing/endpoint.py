"""One worker endpoint as this replica sees it: in-flight count, health, and last scraped load.

Plain mutable state, changed only on the event loop by the pool (requests), the health rules
(gateway.routing.health) and the monitor (probes, scrapes, confirmation).
"""

from __future__ import annotations

import enum

from gateway.routing.policy import endpoint_seed

# How often the monitor asks a pending endpoint whether it serves its pool's model.
CONFIRM_INTERVAL_S = 1.0


class EndpointState(enum.Enum):
    PENDING = "pending"  # discovered, not yet confirmed to serve the pool's model
    HEALTHY = "healthy"
    EJECTED = "ejected"  # failures in a row (gateway.routing.health): out for a backoff, then a trial
    UNHEALTHY = "unhealthy"  # its /health probe fails
    REMOVED = "removed"  # gone from discovery; its in-flight requests finish


class Endpoint:
    __slots__ = (
        "confirmed",
        "ejected_because",
        "ejected_until",
        "ejections",
        "endpoint_failed",
        "failing_teams",
        "failures",
        "hrw_seed",
        "inflight",
        "kv_cache_usage",
        "last_probe_at",
        "last_scrape_at",
        "load_base",
        "max_model_len",
        "models_read",
        "probe_ok",
        "removed",
        "running",
        "scraped_at",
        "trial_inflight",
        "url",
        "usable",
        "waiting",
    )

    def __init__(self, url: str, *, confirmed: bool = True) -> None:
        self.url = url
        self.hrw_seed = endpoint_seed(url)
        self.inflight = 0
        self.confirmed = confirmed
        self.removed = False
        self.probe_ok = True
        self.failures = 0  # consecutive
        # What the current run of failures holds (gateway.routing.health decides what ejects):
        # a failure no request can provoke, and the teams whose requests failed (capped).
        self.endpoint_failed = False
        self.failing_teams: set[str] = set()
        self.ejections = 0  # in a row, for the backoff
        self.ejected_until: float | None = None
        # Why the last ejection happened (gateway.routing.health), for the admin API and CLI.
        self.ejected_because: str | None = None
        self.trial_inflight = False
        # Scraped load; load_base is what the policies read (see EndpointView).
        self.running = 0
        self.waiting = 0
        self.kv_cache_usage = 0.0
        self.scraped_at: float | None = None
        self.load_base = 0.0
        self.last_probe_at = float("-inf")
        self.last_scrape_at = float("-inf")
        # The context the worker reports in GET /v1/models (vLLM's `max_model_len`), once read.
        self.max_model_len: int | None = None
        self.models_read = False
        self.usable = confirmed
        self.refresh()

    def reset_failures(self) -> None:
        self.failures = 0
        self.endpoint_failed = False
        self.failing_teams.clear()

    def probe_now(self) -> None:
        """Makes its `/health` probe due at once, whatever the interval: at the monitor's next
        round, or as soon as a probe still out ends."""
        self.last_probe_at = float("-inf")

    def refresh(self) -> None:
        """Recomputes `usable`, the one flag the request path reads."""
        self.usable = self.confirmed and not self.removed and self.probe_ok and self.ejected_until is None

    @property
    def state(self) -> EndpointState:
        if self.removed:
            return EndpointState.REMOVED
        if not self.confirmed:
            return EndpointState.PENDING
        if self.ejected_until is not None:
            return EndpointState.EJECTED
        if not self.probe_ok:
            return EndpointState.UNHEALTHY
        return EndpointState.HEALTHY

    def trial_ready(self, now: float) -> bool:
        """Ejected, its backoff over, its probe passing, and no trial request out yet."""
        return (
            self.ejected_until is not None
            and now >= self.ejected_until
            and not self.trial_inflight
            and self.probe_ok
            and self.confirmed
            and not self.removed
        )

    def __repr__(self) -> str:
        return f"Endpoint({self.url!r}, {self.state.value}, inflight={self.inflight})"
