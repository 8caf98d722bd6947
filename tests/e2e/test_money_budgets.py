"""Money budgets (`daily_cost`, `monthly_cost`) through a real gateway and a real Redis: a key or
team whose money is spent gets 429 insufficient_quota naming whose budget it is and that it is
money, with retry-after at the period's end; what admission reserved is settled to what the tokens
cost (the budget's counter equals the usage report's recorded cost); the output is clamped to what
the money left can buy; a model without a price cannot be served under a money budget; bad budgets
are 400s naming the field."""

from __future__ import annotations

import calendar
import datetime as dt
import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import redis

from gateway.model_table import ModelConfig, ModelTable
from gateway.pricing import Price
from gateway.redis import keys as redis_keys
from tests.cli import cli_env, run_cli
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory
from tests.http import Reply, get, post
from tests.redis_cluster import RedisServer
from tests.waiting import wait_until

# 0.001 a prompt token and 0.002 an output token: a request of ~10 tokens costs a few hundredths.
PRICE = Price(Decimal("1000"), Decimal("2000"))
UNPRICED = "unpriced-model"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def priced(make_gateway_module: GatewayFactory, fake_worker: str) -> Iterator[Gateway]:
    table = ModelTable(
        (
            ModelConfig(name=FAKE_MODEL, endpoints=(fake_worker,), price=PRICE),
            ModelConfig(name=UNPRICED, upstream_model=FAKE_MODEL, endpoints=(fake_worker,)),
        )
    )
    with make_gateway_module(table) as gateway:
        yield gateway


def _chat(gw: Gateway, key: str, model: str = FAKE_MODEL, **body: Any) -> Reply:
    return post(
        f"{gw.url}/v1/chat/completions",
        {"model": model, "messages": HI, "max_tokens": 10, **body},
        key=key,
        headers={"x-fake-tokens": "10"},
    )


def _until_refused(gw: Gateway, key: str, most: int = 20) -> tuple[list[Reply], Reply]:
    served: list[Reply] = []
    for _ in range(most):
        reply = _chat(gw, key)
        if reply.status != 200:
            return served, reply
        served.append(reply)
    raise AssertionError(f"no refusal in {most} requests")


def _seconds_to_month_end() -> float:
    now = dt.datetime.now(dt.UTC)
    days = calendar.monthrange(now.year, now.month)[1]
    end = dt.datetime(now.year, now.month, days, tzinfo=dt.UTC) + dt.timedelta(days=1)
    return (end - now).total_seconds()


def test_a_spent_team_money_budget_is_a_429_at_the_month_end_and_settles_to_recorded_costs(
    priced: Gateway, redis_server: RedisServer
) -> None:
    team = priced.new_team()
    patched = priced.admin.call("PATCH", f"/admin/v1/teams/{team}", {"monthly_cost": "0.1"})
    assert patched["limits"] == {"monthly_cost": "0.1"}
    key = priced.new_key(team=team)
    served, refused = _until_refused(priced, key["key"])
    assert 1 <= len(served) <= 4
    assert refused.status == 429
    error = refused.json()["error"]
    assert (error["code"], error["type"]) == ("insufficient_quota", "insufficient_quota")
    assert f"team {team} monthly cost (money)" in error["message"]
    assert "Money budget exhausted" in error["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= _seconds_to_month_end() + 1
    # Before the refusal, what was left clamped the output (as a token budget does) or was enough.
    clamped = [r for r in served if r.headers.get("x-sluicegate-max-tokens-limited-by") == "budget"]
    assert all(r.json()["usage"]["completion_tokens"] < 10 for r in clamped)
    # Settled: the budget's counter is exactly what the usage report says was spent.
    wait_until(lambda: sum(r["requests"] for r in priced.usage(team)) == len(served), 10, "usage recorded")
    spent = sum(Decimal(r["cost"]) for r in priced.usage(team))
    month = dt.datetime.now(dt.UTC).strftime("%Y-%m")
    with redis.Redis.from_url(redis_server.url) as raw:
        counter = int(raw.get(redis_keys.rate_limits(team) + f"budget:cm:{month}") or 0)
    assert counter == spent * 10**9
    assert spent <= Decimal("0.1")


def test_a_key_daily_money_budget_names_the_key_and_leaves_its_team_mate(priced: Gateway) -> None:
    team = priced.new_team()
    capped = priced.new_key(team=team, daily_cost="0.05")
    mate = priced.new_key(team=team)
    assert capped["limits"] == {"daily_cost": "0.05"}
    _, refused = _until_refused(priced, capped["key"])
    assert f"key {capped['id']} daily cost (money)" in refused.json()["error"]["message"]
    assert [_chat(priced, mate["key"]).status for _ in range(3)] == [200, 200, 200]


def test_a_model_without_a_price_is_refused_under_a_money_budget_only(priced: Gateway) -> None:
    capped = priced.new_key(monthly_cost="10")
    refused = _chat(priced, capped["key"], model=UNPRICED)
    assert refused.status == 403
    message = refused.json()["error"]["message"]
    assert f"Model '{UNPRICED}' has no price" in message
    assert "monthly cost (money)" in message
    # Priced: served under the budget. Without a money budget: served, priced or not.
    assert _chat(priced, capped["key"]).status == 200
    assert _chat(priced, priced.new_key()["key"], model=UNPRICED).status == 200


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("-1", "monthly_cost"),
        ("abc", "daily_cost"),
        ("1e3", "daily_cost"),
        ("0.0000000001", "monthly_cost"),  # ten decimal places: finer than a nano-unit
        (12, "daily_cost"),  # a JSON number: not exact
        ("0", "daily_cost"),
        ("9007199.254740992", "monthly_cost"),  # 2^53 nano-units
    ],
)
def test_a_bad_money_budget_is_a_400_naming_the_field(priced: Gateway, value: object, field: str) -> None:
    team = priced.new_team()
    reply = post(
        f"{priced.url}/admin/v1/keys",
        {"team": team, field: value},
        headers={"authorization": f"Bearer {priced.admin_token}"},
    )
    assert reply.status == 400
    error = reply.json()["error"]
    assert error["param"] == field
    assert field in error["message"]


def test_money_budgets_are_kept_as_exact_decimals(priced: Gateway) -> None:
    key = priced.new_key(daily_cost="0.000000001", monthly_cost="9007199.254740991")
    assert key["limits"] == {"daily_cost": "0.000000001", "monthly_cost": "9007199.254740991"}
    patched = priced.admin.call("PATCH", f"/admin/v1/keys/{key['id']}", {"daily_cost": "12.50"})
    assert patched["limits"]["daily_cost"] == "12.5"


def test_the_output_is_clamped_to_what_the_money_left_can_buy(priced: Gateway) -> None:
    # About 0.01 of prompt leaves room for some 25 output tokens at 0.002 each: less than the
    # 100 asked, more than the 16 a request is admitted for.
    key = priced.new_key(daily_cost="0.06")
    reply = _chat(priced, key["key"], max_tokens=100)
    assert reply.status == 200
    assert reply.headers["x-sluicegate-max-tokens-limited-by"] == "budget"
    unlimited = _chat(priced, priced.new_key()["key"], max_tokens=100)
    assert "x-sluicegate-max-tokens-limited-by" not in unlimited.headers


def test_the_cli_sets_money_budgets_as_typed_and_shows_the_field_it_refuses(priced: Gateway) -> None:
    env = cli_env(priced.url, SLUICEGATE_ADMIN_TOKEN=priced.admin_token)
    team = priced.new_team()
    made = run_cli(
        env, "keys", "create", "--team", team, "--daily-cost", "0.25", "--monthly-cost", "7", "--json"
    )
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)
    priced.secrets_created.append(key["key"])
    assert key["limits"] == {"daily_cost": "0.25", "monthly_cost": "7"}
    updated = run_cli(env, "teams", "update", team, "--monthly-cost", "100.000000001")
    assert updated.returncode == 0, updated.stderr
    assert priced.admin.call("GET", f"/admin/v1/teams/{team}")["limits"] == {"monthly_cost": "100.000000001"}
    refused = run_cli(env, "teams", "update", team, "--daily-cost", "-1")
    assert refused.returncode != 0
    assert "daily_cost" in refused.stderr


def test_the_usage_api_and_cli_show_spent_remaining_and_a_forecast(priced: Gateway) -> None:
    team = priced.new_team()
    priced.admin.call("PATCH", f"/admin/v1/teams/{team}", {"monthly_cost": "5"})
    key = priced.new_key(team=team, daily_cost="2")
    for _ in range(2):
        assert _chat(priced, key["key"]).status == 200
    wait_until(lambda: sum(r["requests"] for r in priced.usage(team)) == 2, 10, "usage recorded")
    report = priced.admin.call("GET", "/admin/v1/usage", team=team)
    spent = sum(Decimal(r["cost"]) for r in report["data"])
    budgets = {(b["owner"], b["period"]): b for b in report["budgets"]}
    assert set(budgets) == {("team", "monthly"), ("key", "daily")}
    monthly, daily = budgets[("team", "monthly")], budgets[("key", "daily")]
    assert (Decimal(monthly["spent"]), Decimal(daily["spent"])) == (spent, spent)
    assert Decimal(monthly["remaining"]) == Decimal(5) - spent
    assert Decimal(daily["remaining"]) == Decimal(2) - spent
    assert daily["key_id"] == key["id"]
    # Straight on from what was spent so far: never less than it, and more with time left.
    assert Decimal(monthly["forecast"]) >= spent
    assert Decimal(daily["forecast"]) > spent
    assert monthly["currency"] == "USD"
    env = cli_env(priced.url, SLUICEGATE_ADMIN_TOKEN=priced.admin_token)
    shown = run_cli(env, "usage", "--team", team)
    assert shown.returncode == 0, shown.stderr
    assert "forecast" in shown.stdout
    assert monthly["remaining"] in shown.stdout


def test_a_key_sees_its_money_budget_left_as_exact_decimals(priced: Gateway) -> None:
    key = priced.new_key(daily_cost="1.5")
    assert _chat(priced, key["key"]).status == 200
    wait_until(lambda: sum(r["requests"] for r in priced.usage(key["team"])) == 1, 10, "usage recorded")
    (row,) = priced.usage(key["team"])
    info = get(f"{priced.url}/v1/key/info", key=key["key"]).json()
    daily = info["remaining"]["key"]["daily_cost"]
    assert (daily["limit"], daily["used"]) == ("1.5", row["cost"])
    assert Decimal(daily["remaining"]) == Decimal("1.5") - Decimal(row["cost"])
