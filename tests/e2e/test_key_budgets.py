"""A key's own daily and monthly token budgets, enforced like its team's: through a real gateway
and a real Redis, a key over its budget gets 429 insufficient_quota while another key of the same
team goes on; the budget can be changed and cleared at once."""

from __future__ import annotations

from typing import Any

from tests.conftest import FAKE_MODEL, Gateway
from tests.http import Reply, post

HI = [{"role": "user", "content": "hi"}]


def _chat(gw: Gateway, key: str, **body: Any) -> Reply:
    return post(
        f"{gw.url}/v1/chat/completions",
        {"model": FAKE_MODEL, "messages": HI, "max_tokens": 10, **body},
        key=key,
        headers={"x-fake-tokens": "10"},
    )


def _until_refused(gw: Gateway, key: str, most: int = 10) -> tuple[int, Reply]:
    """Requests until one is refused: how many were served, and the refusal."""
    for served in range(most):
        reply = _chat(gw, key)
        if reply.status != 200:
            return served, reply
    raise AssertionError(f"no refusal in {most} requests")


def test_a_key_over_its_daily_budget_is_refused_while_its_team_mate_goes_on(gateway: Gateway) -> None:
    team = gateway.new_team()
    capped = gateway.new_key(team=team, daily_tokens=60)
    mate = gateway.new_key(team=team)
    assert capped["limits"] == {"daily_tokens": 60}
    served, refused = _until_refused(gateway, capped["key"])
    assert 1 <= served <= 5  # each request reserves about 12 tokens and uses about 11
    assert refused.status == 429
    error = refused.json()["error"]
    assert error["code"] == "insufficient_quota"
    assert error["type"] == "insufficient_quota"
    assert f"key {capped['id']} daily tokens" in error["message"]
    assert int(refused.headers["retry-after"]) >= 1
    # The team's other key, and the team's own (unlimited) budget, are untouched.
    assert [_chat(gateway, mate["key"]).status for _ in range(3)] == [200, 200, 200]
    assert _chat(gateway, capped["key"]).status == 429


def test_a_key_monthly_budget_is_its_own_and_a_team_budget_still_binds(gateway: Gateway) -> None:
    team = gateway.new_team()
    gateway.admin.call("PATCH", f"/admin/v1/teams/{team}", {"daily_tokens": 200})
    capped = gateway.new_key(team=team, monthly_tokens=40)
    _, refused = _until_refused(gateway, capped["key"])
    assert refused.status == 429
    assert f"key {capped['id']} monthly tokens" in refused.json()["error"]["message"]
    # A key with a budget larger than its team's is bound by the team's.
    big = gateway.new_key(team=team, daily_tokens=10**9)
    _, team_refusal = _until_refused(gateway, big["key"], most=40)
    assert f"team {team} daily tokens" in team_refusal.json()["error"]["message"]


def test_a_key_budget_changes_and_clears_at_once(gateway: Gateway) -> None:
    key = gateway.new_key(daily_tokens=30)
    _until_refused(gateway, key["key"])
    raised = gateway.admin.call("PATCH", f"/admin/v1/keys/{key['id']}", {"daily_tokens": 10_000})
    assert raised["limits"] == {"daily_tokens": 10_000}
    assert _chat(gateway, key["key"]).status == 200
    cleared = gateway.admin.call("PATCH", f"/admin/v1/keys/{key['id']}", {"clear": ["daily_tokens"]})
    assert cleared["limits"] == {}
    assert _chat(gateway, key["key"]).status == 200


def test_a_key_has_no_weight_and_a_model_limit_has_no_budget(gateway: Gateway) -> None:
    # `weight` is the team's share of a pool's queue: on a key it is an unknown field, ignored.
    key = gateway.new_key(weight=5, model_limits={FAKE_MODEL: {"daily_tokens": 5, "rpm": 100}})
    assert key["limits"] == {"model_limits": {FAKE_MODEL: {"rpm": 100}}}
