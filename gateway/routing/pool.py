"""Pools of endpoints per configured model, and the in-flight bookkeeping the policies read."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from gateway.config import ModelConfig, ModelTable
from gateway.routing.policy import Policy, RouteRequest, least_outstanding


@dataclass(slots=True, eq=False)
class Endpoint:
    url: str
    inflight: int = 0


@dataclass(slots=True)
class Pool:
    model: ModelConfig
    endpoints: list[Endpoint]
    policy: Policy = field(default=least_outstanding)

    def pick(
        self, request: RouteRequest, rng: random.Random, exclude: Iterable[Endpoint] = ()
    ) -> Endpoint | None:
        excluded = set(map(id, exclude))
        candidates = [e for e in self.endpoints if id(e) not in excluded]
        if not candidates:
            return None
        chosen = self.policy(candidates, request, rng)
        assert isinstance(chosen, Endpoint)
        return chosen


class Router:
    def __init__(self, table: ModelTable, *, rng: random.Random | None = None) -> None:
        self._pools = {m.name: Pool(m, [Endpoint(url) for url in m.endpoints]) for m in table.models}
        self._by_name = {name: self._pools[model.name] for name, model in table.by_name().items()}
        self.rng = rng or random.Random()

    def resolve(self, name: str) -> Pool | None:
        """A model name or alias -> its pool."""
        return self._by_name.get(name)

    def pools(self) -> list[Pool]:
        return list(self._pools.values())

    def has_endpoints(self) -> bool:
        return any(pool.endpoints for pool in self._pools.values())
