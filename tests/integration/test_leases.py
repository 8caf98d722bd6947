"""Concurrency leases renewed against a real Redis: every slot still held is renewed in one
pipelined round trip per tick, whatever the number of requests and teams; a slot that was let go
is not renewed, so it lapses with its lease (as a dead replica's slots do)."""

from __future__ import annotations

import asyncio
import secrets
from typing import cast

import pytest

from gateway.limits.admission import Limit, LimitKind, Reservation
from gateway.limits.limit_store import LimitStore
from gateway.limits.limiter import RateLimiter
from gateway.metering.meter import Meter
from gateway.metering.usage_store import UsageStore
from gateway.observability.metrics import Metrics
from gateway.redis import keys as redis_keys
from gateway.redis.breaker import RedisBreaker
from gateway.redis.client import RedisClient, close_redis
from tests.redis_cluster import RedisServer, async_client
from tests.waiting import eventually

pytestmark = pytest.mark.also_on_cluster

LEASE_S = 0.3


async def _expiries(redis: RedisClient, key: str) -> dict[bytes, float]:
    return dict(cast(list[tuple[bytes, float]], await redis.zrange(key, 0, -1, withscores=True)))


def test_held_slots_are_renewed_in_one_round_trip_per_tick_and_released_ones_lapse(
    redis_server: RedisServer,
) -> None:
    async def main() -> None:
        redis = async_client(redis_server.url)
        limiter = RateLimiter(
            LimitStore(redis, RedisBreaker(1.0), timeout_s=2),
            Metrics(),
            Meter(UsageStore(redis, timeout_s=2), Metrics()),
            lease_s=LEASE_S,
        )
        round_trips = 0
        pipeline = redis.pipeline

        def counting_pipeline(*args: object, **kwargs: object) -> object:
            nonlocal round_trips
            round_trips += 1
            return pipeline(*args, **kwargs)  # type: ignore[arg-type]

        redis.pipeline = counting_pipeline  # type: ignore[method-assign,assignment]
        try:
            teams = ["t" + secrets.token_hex(4) for _ in range(2)]
            limits = {
                t: Limit(LimitKind.CONCURRENCY, redis_keys.rate_limit(t, "key:k:conc"), 100, "k")
                for t in teams
            }
            admissions = [
                await limiter.admit(team, [limits[team]], f"r{i}", Reservation(0, 0))
                for i in range(20)
                for team in teams
            ]
            assert all(a.allowed and a.lease is not None for a in admissions)
            first = {t: await _expiries(redis, limits[t].redis_key) for t in teams}
            await eventually(lambda: limiter.leases.renewals >= 3, "three renewals")
            # Three ticks, at most one round trip each (plus one that may be under way): never per request.
            assert round_trips <= limiter.leases.renewals + 1
            for team in teams:
                now = await _expiries(redis, limits[team].redis_key)
                assert len(now) == 20
                assert all(now[member] > first[team][member] for member in now)
            # Let one go without settling it (as a replica that died would): it is no longer renewed.
            gone = admissions[0]
            gone.end()
            key, member = limits[teams[0]].redis_key, b"r0"
            score = await redis.zscore(key, member)
            before = limiter.leases.renewals
            await eventually(lambda: limiter.leases.renewals >= before + 2, "two more renewals")
            assert await redis.zscore(key, member) == score
            for admission in admissions:
                admission.end()
            await eventually(lambda: not limiter.leases.renewing, "the renewing task ends with the last slot")
        finally:
            await limiter.aclose()
            await close_redis(redis)

    asyncio.run(main())
