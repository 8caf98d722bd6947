"""What discovery reports to: the router. One verb per change, so discovery never reaches into
routing state and routing never knows where an address came from."""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from gateway.model_table import ModelConfig


class DiscoverySink(Protocol):
    def set_endpoints(self, pool: str, urls: Collection[str]) -> None:
        """The complete set of ready base URLs (`http://10.1.2.3:8000`) of the pool named
        `pool` (a PoolConfig.name). Replaces the previous set; an empty set is allowed."""

    def add_model(self, model: ModelConfig) -> None:
        """A model found by autodiscovery (or changed): its pools start with no endpoints."""

    def remove_model(self, name: str) -> None:
        """A model found by autodiscovery is gone."""
