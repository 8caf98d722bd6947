"""admit.lua's grant against a real Redis: with several token limits and budgets, a request is
admitted with the largest output every one of them can take now (up to what it asked), each is
charged exactly that, and only a prompt that cannot be admitted with the least output is refused."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from gateway.limits.admission import Admission, Limit, LimitKind, Reservation
from gateway.limits.limit_store import LimitStore
from gateway.limits.limiter import RateLimiter
from gateway.limits.spec import TokenCount
from gateway.metering.meter import Meter
from gateway.metering.usage_store import UsageStore
from gateway.observability.metrics import Metrics
from gateway.redis import keys as redis_keys
from gateway.redis.breaker import RedisBreaker
from gateway.redis.client import RedisClient, close_redis
from tests.redis_cluster import RedisServer, async_client

pytestmark = pytest.mark.also_on_cluster

T = TypeVar("T")
TEAM = "grant"


def _run(redis_url: str, scenario: Callable[[RateLimiter, RedisClient], Awaitable[T]]) -> T:
    async def main() -> T:
        redis = async_client(redis_url)
        try:
            meter = Meter(UsageStore(redis, timeout_s=2), Metrics())
            limiter = RateLimiter(LimitStore(redis, RedisBreaker(1.0), timeout_s=2), Metrics(), meter)
            return await scenario(limiter, redis)
        finally:
            await close_redis(redis)

    return asyncio.run(main())


def _key(name: str) -> str:
    return redis_keys.rate_limit(TEAM, f"{secrets.token_hex(4)}:{name}")


def _tpm(amount: int, counts: TokenCount = TokenCount.TOTAL) -> Limit:
    # A long period: the refill during a test is far below one token.
    description = f"key k{amount} tokens per minute"
    return Limit(
        LimitKind.TOKENS, _key("tpm"), amount, description, counts=counts, period_s=3600.0, name="tpm"
    )


def _budget(amount: int) -> Limit:
    return Limit(LimitKind.BUDGET, _key("budget"), amount, f"budget {amount}", period_s=3600.0)


def test_the_grant_is_the_least_any_limit_can_take_and_each_is_charged_that(
    redis_server: RedisServer,
) -> None:
    key_tpm, team_tpm, budget = _tpm(30_000), _tpm(50_000), _budget(25_000)

    async def scenario(limiter: RateLimiter, redis: RedisClient) -> tuple[Admission, int, Admission]:
        first = await limiter.admit(
            TEAM, [key_tpm, team_tpm, budget], "a", Reservation(19_000, 32_000), least=16
        )
        spent = int(await redis.get(budget.redis_key) or 0)
        second = await limiter.admit(
            TEAM, [key_tpm, team_tpm, budget], "b", Reservation(1_000, 32_000), least=16
        )
        return first, spent, second

    first, spent, second = _run(redis_server.url, scenario)
    assert first.allowed
    # The budget has 25,000: 19,000 prompt leaves 6,000 of output; the key's 30,000 would leave 11,000.
    assert first.reservation == Reservation(19_000, 6_000)
    assert first.limited_by == "budget"
    assert first.bounded_by is not None
    assert first.bounded_by.limit is budget
    assert spent == 25_000
    remaining = {s.limit.description: s.remaining for s in first.states}
    assert remaining == {
        "key k30000 tokens per minute": 5_000,
        "key k50000 tokens per minute": 25_000,
        "budget 25000": 0,
    }
    # Nothing left in the budget for even the least output: refused, charging nothing.
    assert not second.allowed
    assert second.denied_by is not None
    assert second.denied_by.limit is budget


def test_a_token_limit_bounds_the_grant_when_it_is_the_tightest(redis_server: RedisServer) -> None:
    key_tpm, budget = _tpm(30_000), _budget(1_000_000)

    async def scenario(limiter: RateLimiter, redis: RedisClient) -> Admission:
        return await limiter.admit(TEAM, [budget, key_tpm], "a", Reservation(19_000, 32_000), least=16)

    admitted = _run(redis_server.url, scenario)
    assert admitted.reservation == Reservation(19_000, 11_000)
    assert admitted.limited_by == "tokens_per_minute"


def test_a_limit_that_does_not_count_output_admits_the_whole_ask(redis_server: RedisServer) -> None:
    inputs, outputs = _tpm(20_000, TokenCount.INPUT), _tpm(500, TokenCount.OUTPUT)

    async def scenario(limiter: RateLimiter, redis: RedisClient) -> tuple[Admission, Admission]:
        only_inputs = await limiter.admit(TEAM, [inputs], "a", Reservation(19_000, 32_000), least=16)
        both = await limiter.admit(
            TEAM, [_tpm(20_000, TokenCount.INPUT), outputs], "b", Reservation(100, 900), least=16
        )
        return only_inputs, both

    only_inputs, both = _run(redis_server.url, scenario)
    assert only_inputs.reservation == Reservation(19_000, 32_000)
    assert only_inputs.limited_by is None
    assert both.reservation == Reservation(100, 500)  # the prompt is not output: all 500 granted


def test_the_grant_is_a_whole_cap_per_answer(redis_server: RedisServer) -> None:
    tpm = _tpm(1_000)

    async def scenario(limiter: RateLimiter, redis: RedisClient) -> Admission:
        return await limiter.admit(TEAM, [tpm], "a", Reservation(5, 8 * 200), least=8 * 16, step=8)

    admitted = _run(redis_server.url, scenario)
    assert admitted.reservation.completion_tokens == 992  # 995 fit; 124 for each of 8 answers


def test_a_prompt_with_the_least_output_past_a_limit_is_refused_and_charges_nothing(
    redis_server: RedisServer,
) -> None:
    tpm, budget = _tpm(1_000), _budget(10_000)

    async def scenario(limiter: RateLimiter, redis: RedisClient) -> tuple[Admission, Admission, int]:
        refused = await limiter.admit(TEAM, [budget, tpm], "a", Reservation(990, 4_000), least=16)
        fits = await limiter.admit(TEAM, [budget, tpm], "b", Reservation(984, 4_000), least=16)
        return refused, fits, int(await redis.get(budget.redis_key) or 0)

    refused, fits, spent = _run(redis_server.url, scenario)
    assert not refused.allowed
    assert refused.denied_by is not None
    assert refused.denied_by.limit is tpm
    error = refused.error()
    assert error.status == 400, "no wait lets 990 + 16 tokens through a limit of 1000"
    assert "tokens per minute" in error.message
    assert "'tpm'" in error.message
    assert fits.allowed
    assert fits.reservation == Reservation(984, 16)
    assert spent == 1_000  # only the admitted request's 984 + 16


def test_without_a_least_the_whole_ask_must_fit_as_before(redis_server: RedisServer) -> None:
    tpm = _tpm(1_000)

    async def scenario(limiter: RateLimiter, redis: RedisClient) -> Admission:
        return await limiter.admit(TEAM, [tpm], "a", Reservation(100, 1_000))

    refused = _run(redis_server.url, scenario)
    assert not refused.allowed
    assert refused.denied_by is not None
    assert refused.denied_by.limit is tpm
