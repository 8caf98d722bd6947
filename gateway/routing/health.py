"""Passive outlier ejection: N failures in a row eject an endpoint for base * 2^(k-1) seconds
(capped), then exactly one trial request decides: success re-admits it and resets the backoff,
failure ejects it again for the next, longer backoff.

Only the trial request's verdict counts while an endpoint is ejected: requests that were already
in flight when it was ejected would otherwise stretch the backoff for failures it was ejected for.
"""

from __future__ import annotations

from gateway.model_table import HealthConfig
from gateway.routing.endpoint import Endpoint


def backoff(config: HealthConfig, ejections: int) -> float:
    return float(min(config.ejection_base * 2 ** max(ejections - 1, 0), config.ejection_max))


def record_success(endpoint: Endpoint, *, trial: bool) -> bool:
    """Returns True when this re-admits an ejected endpoint."""
    endpoint.failures = 0
    if not trial:
        return False
    endpoint.trial_inflight = False
    if endpoint.ejected_until is None:
        return False
    endpoint.ejected_until = None
    endpoint.ejections = 0
    endpoint.refresh()
    return True


def record_failure(endpoint: Endpoint, config: HealthConfig, now: float, *, trial: bool) -> bool:
    """Returns True when this ejects the endpoint (again)."""
    if trial:
        endpoint.trial_inflight = False
        if endpoint.ejected_until is not None:
            _eject(endpoint, config, now)
            return True
    if endpoint.ejected_until is not None:
        return False
    endpoint.failures += 1
    if endpoint.failures < config.failures_to_eject:
        return False
    _eject(endpoint, config, now)
    return True


def record_no_verdict(endpoint: Endpoint, *, trial: bool) -> None:
    """The request ended without telling anything about the endpoint (the client left first)."""
    if trial:
        endpoint.trial_inflight = False


def _eject(endpoint: Endpoint, config: HealthConfig, now: float) -> None:
    endpoint.ejections += 1
    endpoint.ejected_until = now + backoff(config, endpoint.ejections)
    endpoint.failures = 0
    endpoint.refresh()
