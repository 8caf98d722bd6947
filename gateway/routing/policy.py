"""Routing policies: plain functions with one shape, `(candidates, request, rng) -> endpoint`.

A policy sees only what it is given, holds no state, and is called with a non-empty list.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol


class EndpointView(Protocol):
    @property
    def url(self) -> str: ...

    @property
    def inflight(self) -> int: ...


@dataclass(frozen=True, slots=True)
class RouteRequest:
    model: str
    user: str | None = None


Policy = Callable[[Sequence[EndpointView], RouteRequest, random.Random], EndpointView]


def least_outstanding(
    candidates: Sequence[EndpointView], request: RouteRequest, rng: random.Random
) -> EndpointView:
    """Power of two choices over this replica's in-flight counts: near-best balance without
    herding every replica onto the same 'least loaded' endpoint."""
    if len(candidates) == 1:
        return candidates[0]
    first, second = rng.sample(range(len(candidates)), 2)
    a, b = candidates[first], candidates[second]
    return a if a.inflight <= b.inflight else b


POLICIES: dict[str, Policy] = {"least_outstanding": least_outstanding}
