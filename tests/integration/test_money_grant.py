"""admit.lua and settle.lua with money budgets against a real Redis, at the edge of what a Lua
double holds: a budget of 2^53 - 1 nano-units, prices of 12 decimal places, and the grant, the
charge and the settlement all exactly what Python's integers say (no float on the way)."""

from __future__ import annotations

import asyncio
import secrets
from decimal import Decimal

import pytest

from gateway.limits.admission import Limit, LimitKind, Reservation, money_costs
from gateway.limits.limit_store import LimitStore
from gateway.limits.limiter import RateLimiter
from gateway.metering.meter import Meter
from gateway.metering.record import UsageRecord
from gateway.metering.usage_store import UsageStore
from gateway.observability.metrics import Metrics
from gateway.pricing import MAX_NANO, Price
from gateway.redis import keys as redis_keys
from gateway.redis.breaker import RedisBreaker
from gateway.redis.client import close_redis
from tests.redis_cluster import RedisServer, async_client

pytestmark = pytest.mark.also_on_cluster

TEAM = "money-grant"
# 999.999999999999 a million prompt tokens, 1234.567890123456 a million output tokens: the output
# costs 1234567.890123456 nano-units a token, charged 1234568 (rounded up).
PRICE = Price(Decimal("999.999999999999"), Decimal("1234.567890123456"))


def _money(amount: int) -> Limit:
    key = redis_keys.rate_limit(TEAM, f"{secrets.token_hex(4)}:budget:cm")
    return Limit(LimitKind.MONEY, key, amount, "team t monthly cost (money)", period_s=3600.0, price=PRICE)


@pytest.mark.parametrize("spent_before", [0, MAX_NANO - 10**12])
def test_money_is_granted_charged_and_settled_in_exact_integers(
    redis_server: RedisServer, spent_before: int
) -> None:
    prompt, asked, used = 123_457, 1_000_000_000, 4_321

    async def scenario() -> tuple[bool, int, int, int]:
        redis = async_client(redis_server.url)
        try:
            meter = Meter(UsageStore(redis, timeout_s=2), Metrics())
            limiter = RateLimiter(LimitStore(redis, RedisBreaker(1.0), timeout_s=2), Metrics(), meter)
            limit = _money(MAX_NANO)
            await redis.set(limit.redis_key, spent_before)
            admission = await limiter.admit(
                TEAM, [limit], "r-" + secrets.token_hex(4), Reservation(prompt, asked), least=16
            )
            charged = int(await redis.get(limit.redis_key) or 0)
            record = UsageRecord(
                request_id=admission.request_id,
                team=TEAM,
                key_id="k",
                model="m",
                prompt_tokens=prompt,
                completion_tokens=used,
                error=False,
                disconnected=False,
                day=UsageRecord.today(),
                settlements=tuple(admission.settlements(prompt, used)),
                api="chat",
                cost_nano=PRICE.nano_cost(prompt, used),
                price_version=PRICE.version,
            )
            assert await meter.record(record)
            settled = int(await redis.get(limit.redis_key) or 0)
            return admission.allowed, admission.reservation.completion_tokens, charged, settled
        finally:
            await close_redis(redis)

    allowed, granted, charged, settled = asyncio.run(scenario())
    fixed, per_output = money_costs(PRICE, prompt)
    room = MAX_NANO - spent_before
    assert allowed
    assert granted == min(asked, (room - fixed) // per_output)  # what the money left buys, exactly
    assert charged == spent_before + fixed + per_output * granted
    assert charged <= MAX_NANO
    assert settled == spent_before + PRICE.nano_cost(prompt, used)  # the recorded cost, to the nano
