"""A money budget across two gateway replicas on one real Redis: a concurrent burst through both
overshoots the budget by at most the reservations in flight (docs/limits.md), and once the burst
is over the budget's counter is exactly what the usage report says was spent."""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import redis

from gateway.model_table import ModelConfig, ModelTable
from gateway.pricing import Price
from gateway.redis import keys as redis_keys
from tests.conftest import FAKE_MODEL, GatewayFactory
from tests.http import Reply, post
from tests.redis_cluster import RedisServer
from tests.waiting import wait_until

PRICE = Price(Decimal("1000"), Decimal("2000"))  # 0.001 a prompt token, 0.002 an output token
BUDGET = Decimal("0.3")
CONCURRENCY = 8  # requests in flight at once, across both replicas
BURST = 40
MAX_TOKENS = 10


def test_a_burst_through_two_replicas_overshoots_by_at_most_the_reservations_in_flight(
    make_gateway: GatewayFactory, fake_worker: str, redis_server: RedisServer
) -> None:
    table = ModelTable((ModelConfig(name=FAKE_MODEL, endpoints=(fake_worker,), price=PRICE),))
    with make_gateway(table) as one, make_gateway(table) as two:
        team = one.new_team()
        one.admin.call("PATCH", f"/admin/v1/teams/{team}", {"monthly_cost": str(BUDGET)})
        key = one.new_key(team=team)["key"]

        def ask(i: int) -> Reply:
            replica = (one, two)[i % 2]
            return post(
                f"{replica.url}/v1/chat/completions",
                {
                    "model": FAKE_MODEL,
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": MAX_TOKENS,
                },
                key=key,
                headers={"x-fake-tokens": str(MAX_TOKENS)},
            )

        with ThreadPoolExecutor(CONCURRENCY) as pool:
            replies = list(pool.map(ask, range(BURST)))
        served = [r for r in replies if r.status == 200]
        refused = [r for r in replies if r.status != 200]
        assert served, "the burst spends the budget"
        assert refused, "and is refused past it"
        assert {r.json()["error"]["code"] for r in refused} == {"insufficient_quota"}
        wait_until(
            lambda: sum(r["requests"] for r in one.usage(team)) == len(served), 10, "every answer metered"
        )
        rows = two.usage(team)
    spent = sum(Decimal(r["cost"]) for r in rows)
    # The most one request can reserve: its prompt (as the worker counted it; admission's estimate
    # is no smaller for this prompt) and the whole output cap, at the model's prices.
    prompt = max(r["prompt_tokens"] // r["requests"] for r in rows)
    most_reserved = PRICE.cost(prompt, MAX_TOKENS)
    assert spent <= BUDGET + CONCURRENCY * most_reserved
    # Every admitted request was charged before it ran, and settled to what it cost: nothing is
    # left over in the counter, on either replica's account.
    month = dt.datetime.now(dt.UTC).strftime("%Y-%m")
    with redis.Redis.from_url(redis_server.url) as raw:
        counter = int(raw.get(redis_keys.rate_limits(team) + f"budget:cm:{month}") or 0)
    assert counter == spent * 10**9
    # Admission reserves the most a request can cost: with estimates no smaller than the
    # worker's counts, the budget is not overshot at all.
    assert spent <= BUDGET
