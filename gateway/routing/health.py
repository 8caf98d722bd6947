"""Passive outlier ejection: N failures in a row eject an endpoint for base * 2^(k-1) seconds
(capped), then exactly one trial request decides: success re-admits it and resets the backoff,
failure ejects it again for the next, longer backoff.

Which failures may eject. An endpoint is shared by every team that uses its model, and some
failures are what one request asked for: the worker's 5xx answer to it, or its own deadline
passing (a huge prompt, a long generation). One team sending such requests must not take the
endpoint away from everyone else, so a run of failures ejects only when it holds a failure no
request can cause (the endpoint unreachable, an answer that is not HTTP, a redirect, a stream that
broke off) or failed requests from `teams_to_eject` distinct teams. When one team's failures alone
reach the threshold the endpoint is suspect: its `/health` probe is made due now, and a failing
probe takes it out of rotation (the monitor's rule, unhealthy until a probe passes).

Only the trial request's verdict counts while an endpoint is ejected: requests that were already
in flight when it was ejected would otherwise stretch the backoff for failures it was ejected for.
A trial that fails for a reason no request can cause ejects again; one that fails in a way its
own request may have provoked decides nothing, and the next request is the next trial.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gateway.model_table import HealthConfig
from gateway.routing.endpoint import Endpoint


class VerdictKind(enum.Enum):
    # An HTTP answer in time: a status below 500 (a 4xx is the client's mistake, not the
    # endpoint's), or a stream's first event.
    SERVED = "served"
    # The request ended without telling anything about the endpoint (the client left first).
    NONE = "none"
    # Nothing a request can provoke: unreachable, not HTTP, a redirect, a stream that broke off.
    ENDPOINT_FAILED = "endpoint_failed"
    # A 5xx answer or a timeout: possibly this request's own doing.
    REQUEST_FAILED = "request_failed"


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: VerdictKind
    team: str = ""  # whose request it was: REQUEST_FAILED counts teams


SERVED = Verdict(VerdictKind.SERVED)
NO_VERDICT = Verdict(VerdictKind.NONE)
ENDPOINT_FAILED = Verdict(VerdictKind.ENDPOINT_FAILED)


class Change(enum.Enum):
    """What a verdict did to the endpoint, for the pool to act on."""

    NONE = "none"
    EJECTED = "ejected"  # (again)
    READMITTED = "readmitted"
    SUSPECT = "suspect"  # one team's failures reached the threshold: probe it now


def backoff(config: HealthConfig, ejections: int) -> float:
    return float(min(config.ejection_base * 2 ** max(ejections - 1, 0), config.ejection_max))


def record(endpoint: Endpoint, verdict: Verdict, config: HealthConfig, now: float, *, trial: bool) -> Change:
    if verdict.kind is VerdictKind.NONE:
        if trial:
            endpoint.trial_inflight = False
        return Change.NONE
    if verdict.kind is VerdictKind.SERVED:
        return Change.READMITTED if _record_success(endpoint, trial=trial) else Change.NONE
    return _record_failure(endpoint, verdict, config, now, trial=trial)


def _record_success(endpoint: Endpoint, *, trial: bool) -> bool:
    """Returns True when this re-admits an ejected endpoint."""
    endpoint.reset_failures()
    if not trial:
        return False
    endpoint.trial_inflight = False
    if endpoint.ejected_until is None:
        return False
    endpoint.ejected_until = None
    endpoint.ejected_because = None
    endpoint.ejections = 0
    endpoint.refresh()
    return True


def _record_failure(
    endpoint: Endpoint, verdict: Verdict, config: HealthConfig, now: float, *, trial: bool
) -> Change:
    if trial:
        endpoint.trial_inflight = False
        if endpoint.ejected_until is not None:
            if verdict.kind is VerdictKind.REQUEST_FAILED:
                # This request's own failure tells nothing about the endpoint: the next request,
                # maybe another team's, is the next trial. (Re-ejecting would let one team keep a
                # shared endpoint out for everyone.)
                return Change.NONE
            _eject(endpoint, config, now, "its trial request failed: " + _ENDPOINT_FAILURES)
            return Change.EJECTED
    if endpoint.ejected_until is not None:
        return Change.NONE
    endpoint.failures += 1
    if verdict.kind is VerdictKind.ENDPOINT_FAILED:
        endpoint.endpoint_failed = True
    elif len(endpoint.failing_teams) < config.teams_to_eject:  # more would tell nothing new
        endpoint.failing_teams.add(verdict.team)
    if endpoint.failures < config.failures_to_eject:
        return Change.NONE
    if endpoint.endpoint_failed or len(endpoint.failing_teams) >= config.teams_to_eject:
        _eject(endpoint, config, now, _because(endpoint))
        return Change.EJECTED
    # Once per run: a team that keeps failing must not make the gateway probe on every request.
    return Change.SUSPECT if endpoint.failures == config.failures_to_eject else Change.NONE


# What ENDPOINT_FAILED verdicts are, in the words the admin API and `sluicegate pools` show.
_ENDPOINT_FAILURES = "unreachable, not HTTP, a redirect or a stream that broke off"


def _because(endpoint: Endpoint) -> str:
    """Why a run of failures ejects, said before the run is reset."""
    if endpoint.endpoint_failed:
        return f"{endpoint.failures} failures in a row, one of them no request causes ({_ENDPOINT_FAILURES})"
    teams = len(endpoint.failing_teams)
    return f"{endpoint.failures} failures in a row (5xx or timeouts) from {teams} teams' requests"


def _eject(endpoint: Endpoint, config: HealthConfig, now: float, because: str) -> None:
    endpoint.ejected_because = because
    endpoint.ejections += 1
    endpoint.ejected_until = now + backoff(config, endpoint.ejections)
    endpoint.reset_failures()
    endpoint.refresh()
