"""Costs recorded when the tokens were spent (gateway/pricing.py, gateway/metering): a price change
(a rollout with a new model table, on the same Redis) leaves what earlier requests cost as it was,
and usage recorded before costs were is priced as today and says so."""

from __future__ import annotations

from decimal import Decimal

import openai
import redis

from gateway.metering.record import UsageRecord
from gateway.model_table import ModelConfig, ModelTable
from gateway.pricing import Price
from gateway.redis import keys as redis_keys
from tests.conftest import FAKE_MODEL, GatewayFactory
from tests.redis_cluster import RedisServer
from tests.waiting import wait_until

BEFORE = Price(Decimal("0.15"), Decimal("0.6"))
AFTER = Price(Decimal("3"), Decimal("15"))


def _table(worker: str, price: Price | None) -> ModelTable:
    return ModelTable((ModelConfig(name=FAKE_MODEL, endpoints=(worker,), price=price),))


def _ask(client: openai.OpenAI) -> tuple[int, int]:
    completion = client.chat.completions.create(
        model=FAKE_MODEL, messages=[{"role": "user", "content": "one two"}], max_tokens=5
    )
    assert completion.usage is not None
    return completion.usage.prompt_tokens, completion.usage.completion_tokens


def _exact(price: Price, tokens: tuple[int, int]) -> Decimal:
    return (tokens[0] * price.input_per_million + tokens[1] * price.output_per_million) / 1_000_000


def test_a_price_change_leaves_past_costs_as_they_were(
    make_gateway: GatewayFactory, fake_worker: str, redis_server: RedisServer
) -> None:
    with make_gateway(_table(fake_worker, BEFORE)) as gateway:
        key = gateway.new_key()
        team = key["team"]
        first = _ask(gateway.client(key["key"]))
        wait_until(lambda: len(gateway.usage(team)) == 1, 10, "the first request's usage recorded")
    with make_gateway(_table(fake_worker, AFTER)) as gateway:
        second = _ask(gateway.client(key["key"]))
        wait_until(lambda: len(gateway.usage(team)) == 2, 10, "the second request's usage recorded")
        # Usage metered before costs were recorded: a field without a price version.
        day = UsageRecord.today()
        with redis.Redis.from_url(redis_server.url) as raw:
            raw.hset(
                redis_keys.usage_day(team, day),
                mapping={
                    f"{key['id']}|{FAKE_MODEL}|chat|requests": 1,
                    f"{key['id']}|{FAKE_MODEL}|chat|prompt_tokens": 1000,
                    f"{key['id']}|{FAKE_MODEL}|chat|completion_tokens": 10,
                },
            )
        report = gateway.admin.call("GET", "/admin/v1/usage", team=team)
    rows = report["data"]
    recorded = [r for r in rows if r["cost_source"] == "recorded"]
    costs = sorted(Decimal(r["cost"]) for r in recorded)
    assert costs == sorted([_exact(BEFORE, first), _exact(AFTER, second)])
    assert {r["price_version"] for r in recorded} == {BEFORE.version, AFTER.version}
    assert all(r["currency"] == "USD" for r in recorded)
    (repriced,) = [r for r in rows if r["cost_source"] == "repriced"]
    assert repriced["price_version"] is None
    assert Decimal(repriced["cost"]) == _exact(AFTER, (1000, 10))  # at today's prices
    total = _exact(BEFORE, first) + _exact(AFTER, second) + _exact(AFTER, (1000, 10))
    assert Decimal(report["totals"]["cost"]) == total
    assert report["totals"]["cost_source"] == "mixed"


def test_a_model_priced_later_leaves_earlier_usage_free(
    make_gateway: GatewayFactory, fake_worker: str
) -> None:
    with make_gateway(_table(fake_worker, None)) as gateway:
        key = gateway.new_key()
        _ask(gateway.client(key["key"]))
        wait_until(lambda: len(gateway.usage(key["team"])) == 1, 10, "the usage recorded")
    with make_gateway(_table(fake_worker, AFTER)) as gateway:
        (row,) = gateway.usage(key["team"])
    assert (row["cost"], row["cost_source"], row["price_version"]) == (None, "recorded", "none")
