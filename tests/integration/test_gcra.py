"""admit.lua and settle.lua against a real Redis: exact counts, all-or-nothing admission across
kinds of limit, reservations settled with the real usage, hash tags."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from gateway.limits.admission import Limit, LimitKind, Reservation
from gateway.limits.limit_store import LimitStore
from gateway.limits.limiter import RateLimiter
from gateway.metering.meter import Meter
from gateway.metering.record import UsageRecord
from gateway.metering.usage_store import UsageStore
from gateway.observability.metrics import Metrics
from gateway.redis import keys as redis_keys
from gateway.redis.breaker import RedisBreaker
from gateway.redis.client import RedisClient, close_redis
from tests.redis_cluster import RedisServer, async_client

pytestmark = pytest.mark.also_on_cluster

T = TypeVar("T")
ONE = Reservation(0, 0)


def _run(redis_url: str, scenario: Callable[[RateLimiter, RedisClient], Awaitable[T]]) -> T:
    async def main() -> T:
        redis = async_client(redis_url)
        try:
            return await scenario(
                RateLimiter(
                    LimitStore(redis, RedisBreaker(1.0), timeout_s=2),
                    Metrics(),
                    Meter(UsageStore(redis, timeout_s=2), Metrics()),
                ),
                redis,
            )
        finally:
            await close_redis(redis)

    return asyncio.run(main())


def _team() -> str:
    return "t" + secrets.token_hex(4)


def test_concurrent_admissions_never_exceed_the_limit(redis_server: RedisServer) -> None:
    team = _team()
    limit = Limit(LimitKind.REQUESTS, redis_keys.rate_limit(team, "key:k1:rpm"), 10, "k1")

    async def scenario(limiter: RateLimiter, redis: RedisClient) -> list[bool]:
        # The client's first call, alone: on a cluster, 50 first calls at once each start reading the
        # slot map, and a read that replaces the node connections can cut another call's socket (a
        # cold-client burst, noted in issue 25's note; this test is about the limit, not about that).
        await redis.exists(limit.redis_key)
        results = await asyncio.gather(*(limiter.admit(team, [limit], f"r{i}", ONE) for i in range(50)))
        return [r.allowed for r in results]

    assert sum(_run(redis_server.url, scenario)) == 10


def test_a_denial_charges_no_limit_and_names_the_one_that_refused(redis_server: RedisServer) -> None:
    team = _team()
    tight = Limit(LimitKind.REQUESTS, redis_keys.rate_limit(team, "key:tight"), 2, "tight")
    loose = Limit(LimitKind.REQUESTS, redis_keys.rate_limit(team, "team"), 100, "loose")

    async def scenario(limiter: RateLimiter, redis: RedisClient) -> tuple[list[bool], str | None, int]:
        results = [await limiter.admit(team, [loose, tight], f"r{i}", ONE) for i in range(4)]
        denied = results[-1].denied_by
        after = await limiter.admit(team, [loose], "after", ONE)
        return (
            [r.allowed for r in results],
            denied.limit.description if denied else None,
            after.states[0].remaining,
        )

    allowed, denied_by, loose_remaining = _run(redis_server.url, scenario)
    assert allowed == [True, True, False, False]
    assert denied_by == "tight"
    assert loose_remaining == 100 - 3  # two admitted requests and this one; refusals charged nothing


def test_the_limit_refills_at_its_rate(redis_server: RedisServer) -> None:
    team = _team()
    limit = Limit(LimitKind.REQUESTS, redis_keys.rate_limit(team, "fast"), 5, "fast", period_s=0.5)

    async def scenario(limiter: RateLimiter, redis: RedisClient) -> tuple[int, float, bool]:
        burst = [await limiter.admit(team, [limit], f"r{i}", ONE) for i in range(6)]
        retry = burst[-1].denied_by.retry_after_s if burst[-1].denied_by else -1.0
        await asyncio.sleep(0.12)  # one emission interval is 0.1 s
        return (
            sum(r.allowed for r in burst),
            retry,
            (await limiter.admit(team, [limit], "later", ONE)).allowed,
        )

    admitted, retry_after, later = _run(redis_server.url, scenario)
    assert admitted == 5
    assert 0 < retry_after <= 0.1
    assert later


def test_concurrency_slots_are_held_until_settled(redis_server: RedisServer) -> None:
    team = _team()
    slots = Limit(LimitKind.CONCURRENCY, redis_keys.rate_limit(team, "key:k:conc"), 2, "slots")

    async def scenario(limiter: RateLimiter, redis: RedisClient) -> list[bool]:
        meter = Meter(UsageStore(redis, timeout_s=2), Metrics())
        first = await limiter.admit(team, [slots], "a", ONE)
        second = await limiter.admit(team, [slots], "b", ONE)
        third = await limiter.admit(team, [slots], "c", ONE)
        await meter.record(_usage(team, "a", first.settlements(0, 0)))
        fourth = await limiter.admit(team, [slots], "d", ONE)
        return [first.allowed, second.allowed, third.allowed, fourth.allowed]

    assert _run(redis_server.url, scenario) == [True, True, False, True]


def test_token_reservations_are_settled_to_the_real_usage(redis_server: RedisServer) -> None:
    team = _team()
    tpm = Limit(LimitKind.TOKENS, redis_keys.rate_limit(team, "team:tpm"), 1000, "tpm")
    budget = Limit(LimitKind.BUDGET, redis_keys.rate_limit(team, "budget:d:x"), 1500, "daily", period_s=3600)

    async def scenario(limiter: RateLimiter, redis: RedisClient) -> tuple[int, int, int, bool, LimitKind]:
        meter = Meter(UsageStore(redis, timeout_s=2), Metrics())
        big = await limiter.admit(team, [tpm, budget], "big", Reservation(100, 800))  # reserves 900
        during = (await limiter.admit(team, [tpm], "probe1", Reservation(0, 0))).states[0].remaining
        await meter.record(_usage(team, "big", big.settlements(100, 50)))  # used 150: 750 back
        after = (await limiter.admit(team, [tpm], "probe2", Reservation(0, 0))).states[0].remaining
        used = int(await redis.get(budget.redis_key) or 0)
        over = await limiter.admit(team, [tpm, budget], "over", Reservation(100, 1300))
        assert over.denied_by is not None
        return during, after, used, over.allowed, over.denied_by.limit.kind

    during, after, used, allowed, refused_by = _run(redis_server.url, scenario)
    assert during == 100
    assert 845 <= after <= 851  # 850 left, give or take the refill since
    assert used == 150
    assert not allowed
    assert refused_by is LimitKind.TOKENS  # 1400 > what the minute has left, checked before the budget


def _usage(team: str, request_id: str, settlements: list[tuple[str, str, str]]) -> UsageRecord:
    return UsageRecord(request_id, team, "key_1", "m", 0, 0, False, False, "2026-11-21", tuple(settlements))


def test_every_key_of_one_team_shares_a_cluster_hash_tag() -> None:
    def tag(key: str) -> str:
        return key[key.index("{") + 1 : key.index("}")]

    team = "ml"
    keys = [
        redis_keys.rate_limit(team, "key:abc:rpm"),
        redis_keys.rate_limits(team),
        redis_keys.request_marker(team, "rid"),
        redis_keys.admission_marker(team, "rid"),
        redis_keys.usage_day(team, "2026-11-21"),
        redis_keys.usage_days(team),
        redis_keys.key_last_used(team),
    ]
    assert {tag(k) for k in keys} == {"t:ml"}
    assert all(redis_keys.team_tag(team) in k for k in keys)
