"""Model names -> models -> weighted pools, kept current by discovery (the Router is its
DiscoverySink) and read by the request path.

A request's pool order: one pool of the model drawn by weight (a 90/10 canary split), then the
model's other pools, then the pools of its `fallbacks` models in order. A fallback's own
fallbacks are not followed: chains would make one request's worst case hard to see.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import random
import time
from collections.abc import Callable, Collection, Iterator, Sequence

from prometheus_client import Counter

from gateway.model_table import ModelConfig, ModelTable
from gateway.observability.metrics import Metrics
from gateway.routing.pool import Pool
from gateway.routing.prefix import DEFAULT_MAX_BLOCKS, Outcome, PrefixIndex, PrefixRouting
from gateway.routing.vtc_store import FairShareStore

# Called with each endpoint URL and the prompt blocks it was just sent (for other replicas).
PrefixSink = Callable[[str, Sequence[bytes]], None]


class ModelRoute:
    """One model and its pools."""

    def __init__(self, model: ModelConfig, pools: list[Pool]) -> None:
        self.model = model
        self.pools = pools
        self._cumulative = list(itertools.accumulate(p.weight for p in pools))

    def pool_order(self, rng: random.Random) -> list[Pool]:
        if len(self.pools) == 1:
            return self.pools
        first = bisect.bisect_right(self._cumulative, rng.random() * self._cumulative[-1])
        first = min(first, len(self.pools) - 1)
        return [self.pools[first], *self.pools[:first], *self.pools[first + 1 :]]


class Router:
    def __init__(
        self,
        table: ModelTable,
        metrics: Metrics,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        prefix_index_blocks: int = DEFAULT_MAX_BLOCKS,
    ) -> None:
        self.rng = rng or random.Random()
        # One index for every prefix_affinity pool: blocks are told apart by the endpoint URLs
        # that served them, and a pool only asks about its own endpoints.
        self.prefix_index = PrefixIndex(prefix_index_blocks)
        metrics.prefix_index_blocks.set_function(lambda: len(self.prefix_index))
        self.prefix_sink: PrefixSink | None = None  # set while the index is shared (prefix_share)
        self.metrics = metrics
        self._clock = clock
        self._models: dict[str, ModelRoute] = {}
        self._by_name: dict[str, ModelRoute] = {}
        self._pools: dict[str, Pool] = {}
        self._native: dict[str, frozenset[str]] = {}  # per client API, rebuilt when models change
        self._fair_share: FairShareStore | None = None  # set while the app has Redis
        for model in table.models:
            self.add_model(model)

    def attach_fair_share(self, store: FairShareStore | None) -> list[asyncio.Task[None]]:
        """Token fair share through Redis (the app's lifespan); None when the app stops: returns
        the tasks that were talking to Redis, cancelled, for the app to await."""
        self._fair_share = store
        return [task for pool in self._pools.values() for task in pool.attach(store)]

    # -- DiscoverySink ------------------------------------------------------------------------

    def set_endpoints(self, pool: str, urls: Collection[str]) -> None:
        found = self._pools.get(pool)
        if found is not None:
            found.set_endpoints(urls)

    def add_model(self, model: ModelConfig) -> None:
        """Adds or replaces a model; a pool whose name it keeps keeps its endpoints and their state."""
        old = self._models.pop(model.name, None)
        kept: dict[str, Pool] = {}
        if old is not None:
            self._unindex(old)
            kept = {p.name: p for p in old.pools}
        pools: list[Pool] = []
        for config in model.pool_configs():
            previous = kept.pop(config.name, None)
            pool = Pool(
                model,
                config,
                self.metrics,
                rng=self.rng,
                clock=self._clock,
                previous=previous,
                prefix=self._prefix_routing(model, config.name),
                fair_share=self._fair_share,
            )
            pools.append(pool)
            self._pools[pool.name] = pool
        for pool in pools:
            if pool.prefix is None:  # kept under a policy that no longer routes by prefix
                self._forget_prefix_series(pool.name)
        for gone in kept.values():
            gone.close()
            self._forget_prefix_series(gone.name)
        route = ModelRoute(model, pools)
        self._native.clear()
        self.metrics.price_changed(model.name, old.model.price if old else None, model.price)
        self._models[model.name] = route
        for name in (model.name, *model.aliases):
            self._by_name[name] = route

    def _prefix_routing(self, model: ModelConfig, pool: str) -> PrefixRouting | None:
        if model.routing.policy != "prefix_affinity":
            return None
        counter = self.metrics.prefix_routing
        # Children of this pool's own, not Metrics.child's cache: _forget_prefix_series removes
        # them when the pool goes, and a pool of that name later starts a fresh series.
        children: dict[str, Counter] = {}

        def outcome(name: str) -> None:
            child = children.get(name)
            if child is None:
                child = children[name] = counter.labels(pool, name)
            child.inc()

        return PrefixRouting(
            self.prefix_index,
            model.routing.prefix.max_extra_load,
            block_bytes=model.routing.prefix.block_bytes,
            on_record=self._share_prefix,
            on_outcome=outcome,
        )

    def _forget_prefix_series(self, pool: str) -> None:
        for outcome in Outcome.ALL:
            with contextlib.suppress(KeyError):
                self.metrics.prefix_routing.remove(pool, outcome)

    def _share_prefix(self, url: str, blocks: Sequence[bytes]) -> None:
        if self.prefix_sink is not None:
            self.prefix_sink(url, blocks)

    def remove_model(self, name: str) -> None:
        route = self._models.pop(name, None)
        if route is None:
            return
        self._native.clear()
        self.metrics.price_changed(name, route.model.price, None)
        self._unindex(route)
        for pool in route.pools:
            pool.close()
            self._forget_prefix_series(pool.name)

    def _unindex(self, route: ModelRoute) -> None:
        for name in (route.model.name, *route.model.aliases):
            if self._by_name.get(name) is route:
                del self._by_name[name]
        for pool in route.pools:
            if self._pools.get(pool.name) is pool:
                del self._pools[pool.name]

    # -- reading ------------------------------------------------------------------------------

    def resolve(self, name: str) -> ModelRoute | None:
        """A model name or alias -> its model and pools."""
        return self._by_name.get(name)

    def native_models(self, api: str) -> frozenset[str]:
        """The names (and aliases) of the models whose workers serve `api` themselves."""
        names = self._native.get(api)
        if names is None:
            names = frozenset(
                name
                for route in self._models.values()
                if route.model.protocols.native(api)
                for name in (route.model.name, *route.model.aliases)
            )
            self._native[api] = names
        return names

    def models(self) -> list[ModelRoute]:
        return list(self._models.values())

    def pools(self) -> Iterator[Pool]:
        return iter(list(self._pools.values()))

    def pool(self, name: str) -> Pool | None:
        return self._pools.get(name)

    def plan(self, route: ModelRoute, native_api: str | None = None) -> list[Pool]:
        """The pools to try for one request, in order. `native_api`: a request forwarded as it is
        falls back only to models whose workers serve its API too."""
        order = list(route.pool_order(self.rng))
        for fallback in route.model.fallbacks:
            other = self._by_name.get(fallback)
            if other is None or other is route:
                continue
            if native_api is None or other.model.protocols.native(native_api):
                order.extend(other.pool_order(self.rng))
        return order

    def has_prefix_pools(self) -> bool:
        return any(pool.prefix is not None for pool in self._pools.values())

    def prefix_endpoints(self) -> dict[str, str]:
        """The URLs of the prefix-routed pools' endpoints, each mapped to its own string (what a
        shared index reads other replicas' records against: gateway/routing/prefix_share.py)."""
        return {
            e.url: e.url for pool in self._pools.values() if pool.prefix is not None for e in pool.endpoints
        }

    def has_healthy_endpoint(self) -> bool:
        return any(pool.has_usable() for pool in self._pools.values())

    def has_discovered_pools(self) -> bool:
        return any(pool.discovered for pool in self._pools.values())
