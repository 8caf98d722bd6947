"""The GCRA script against a real Redis: exact counts, atomic multi-limit admission, hash tags."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.asyncio import Redis

from gateway import redis_keys
from gateway.embedded_redis import EmbeddedRedis
from gateway.ratelimit import Limit, RateLimiter

T = TypeVar("T")


def _run(redis_url: str, scenario: Callable[[RateLimiter, Redis], Awaitable[T]]) -> T:
    async def main() -> T:
        redis = Redis.from_url(redis_url)
        try:
            return await scenario(RateLimiter(redis, timeout_s=2), redis)
        finally:
            await redis.aclose()

    return asyncio.run(main())


def test_concurrent_admissions_never_exceed_the_limit(redis_server: EmbeddedRedis) -> None:
    limit = Limit(redis_keys.rate_limit("gcra-a", "key:k1:rpm"), rate=10, period_s=60, description="k1")

    async def scenario(limiter: RateLimiter, redis: Redis) -> list[bool]:
        results = await asyncio.gather(*(limiter.admit([limit]) for _ in range(50)))
        return [r.allowed for r in results]

    allowed = _run(redis_server.url, scenario)
    assert sum(allowed) == 10


def test_a_denial_charges_no_limit_and_names_the_one_that_refused(redis_server: EmbeddedRedis) -> None:
    tight = Limit(redis_keys.rate_limit("gcra-b", "key:tight"), rate=2, period_s=60, description="tight")
    loose = Limit(redis_keys.rate_limit("gcra-b", "team"), rate=100, period_s=60, description="loose")

    async def scenario(limiter: RateLimiter, redis: Redis) -> tuple[list[bool], str | None, int]:
        results = [await limiter.admit([loose, tight]) for _ in range(4)]
        denied = results[-1].denied_by
        after = await limiter.admit([loose])
        return (
            [r.allowed for r in results],
            denied.limit.description if denied else None,
            after.states[0].remaining,
        )

    allowed, denied_by, loose_remaining = _run(redis_server.url, scenario)
    assert allowed == [True, True, False, False]
    assert denied_by == "tight"
    # Two admitted requests and this one charged the loose limit; the two refusals did not.
    assert loose_remaining == 100 - 3


def test_the_limit_refills_at_its_rate(redis_server: EmbeddedRedis) -> None:
    limit = Limit(redis_keys.rate_limit("gcra-c", "fast"), rate=5, period_s=0.5, description="fast")

    async def scenario(limiter: RateLimiter, redis: Redis) -> tuple[int, float, bool]:
        burst = [await limiter.admit([limit]) for _ in range(6)]
        retry = burst[-1].denied_by.retry_after_s if burst[-1].denied_by else -1.0
        await asyncio.sleep(0.12)  # one emission interval is 0.1 s
        return sum(r.allowed for r in burst), retry, (await limiter.admit([limit])).allowed

    admitted, retry_after, later = _run(redis_server.url, scenario)
    assert admitted == 5
    assert 0 < retry_after <= 0.1
    assert later


def test_every_key_of_one_team_shares_a_cluster_hash_tag() -> None:
    def tag(key: str) -> str:
        return key[key.index("{") + 1 : key.index("}")]

    team = "ml"
    keys = [
        redis_keys.rate_limit(team, "key:abc:rpm"),
        redis_keys.request_marker(team, "rid"),
        redis_keys.usage_day(team, "2026-11-21"),
        redis_keys.usage_days(team),
    ]
    assert {tag(k) for k in keys} == {"t:ml"}
