"""The monthly money budget gauge is exported by one replica at a time (gateway/metering/
budget_gauge.py), on a real Redis: of two replicas only the lease holder has series, its value is
the budget's counter over the budget, and when the holder is gone the other takes over."""

from __future__ import annotations

import asyncio
import datetime as dt
import secrets

from prometheus_client import CollectorRegistry

from gateway.keys.store import KeyStore
from gateway.limits.spec import parse_limits
from gateway.metering.budget_gauge import GAUGE, BudgetGauge
from gateway.metering.budget_store import LEASE_KEY, BudgetStore
from gateway.redis import keys as redis_keys
from gateway.redis.client import close_redis
from tests.redis_cluster import RedisServer, async_client


def _samples(registry: CollectorRegistry) -> dict[str, float]:
    return {
        s.labels["team"]: s.value
        for family in registry.collect()
        if family.name == GAUGE
        for s in family.samples
    }


def test_one_replica_exports_the_budget_gauge_and_another_takes_over(redis_server: RedisServer) -> None:
    async def scenario() -> tuple[
        list[bool], dict[str, float], dict[str, float], list[bool], dict[str, float]
    ]:
        redis = async_client(redis_server.url)
        try:
            store = KeyStore(redis)
            await store.create_team("gauge-ml", parse_limits({"monthly_cost": "4"}, budgets=True))
            await store.create_team("gauge-free", parse_limits({"rpm": 5}, budgets=True))
            month = dt.datetime.now(dt.UTC).strftime("%Y-%m")
            await redis.set(redis_keys.rate_limits("gauge-ml") + f"budget:cm:{month}", 3_400_000_000)
            # A lease of this test's own: the gateways other tests run on this Redis export too.
            lease = LEASE_KEY + ":" + secrets.token_hex(4)
            registries = [CollectorRegistry(), CollectorRegistry()]
            gauges = [
                BudgetGauge(BudgetStore(redis, lease_key=lease), store, r, interval_s=30, timeout_s=2)
                for r in registries
            ]
            held = [await g.export() for g in gauges]
            holder = held.index(True)
            first = _samples(registries[holder]), _samples(registries[1 - holder])
            # The holder is gone (its lease lapsed): the other replica takes the series over.
            await redis.delete(lease)
            after = [await gauges[1 - holder].export(), await gauges[holder].export()]
            return held, first[0], first[1], after, _samples(registries[1 - holder])
        finally:
            await close_redis(redis)

    held, holder, other, after, taken_over = asyncio.run(scenario())
    assert sorted(held) == [False, True]
    assert holder["gauge-ml"] == 0.85  # 3.4 of 4
    assert "gauge-free" not in holder  # no money budget: no series
    assert other == {}
    assert after == [True, False]
    assert taken_over["gauge-ml"] == 0.85
