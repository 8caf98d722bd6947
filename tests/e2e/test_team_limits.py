"""Team and key limits through the gateway: requests, tokens (reserved, then settled),
concurrency, budgets, per-model limits, and changes that take effect at once."""

from __future__ import annotations

import concurrent.futures
from typing import Any

from tests.conftest import FAKE_MODEL, OTHER_MODEL, Gateway
from tests.http import Reply, post

HI = [{"role": "user", "content": "hi"}]


def _chat(
    gw: Gateway, key: str, model: str = FAKE_MODEL, headers: dict[str, str] | None = None, **body: Any
) -> Reply:
    return post(
        f"{gw.url}/v1/chat/completions", {"model": model, "messages": HI, **body}, key=key, headers=headers
    )


def _team(gw: Gateway, **limits: Any) -> str:
    name = gw.new_team()
    if limits:
        gw.admin.call("PATCH", f"/admin/v1/teams/{name}", limits)
    return name


def test_a_team_limit_is_shared_by_its_keys_and_named_when_it_refuses(gateway: Gateway) -> None:
    team = _team(gateway, rpm=3)
    one, two = gateway.new_key(team=team), gateway.new_key(team=team, rpm=100)
    statuses = [_chat(gateway, k["key"]).status for k in (one, two, one, two)]
    assert statuses == [200, 200, 200, 429]
    refused = _chat(gateway, one["key"])
    assert f"team {team} requests per minute" in refused.json()["error"]["message"]
    # The key's own limit is the tighter one for `two`'s remaining count, the team's for the refusal.
    assert refused.headers["x-ratelimit-limit-requests"] == "3"


def test_tokens_per_minute_never_overshoot_by_more_than_one_reservation(gateway: Gateway) -> None:
    key = gateway.new_key(tpm=200)
    admitted_tokens = 0
    refused = None
    for _ in range(30):
        reply = _chat(gateway, key["key"], max_tokens=20, headers={"x-fake-tokens": "20"})
        if reply.status != 200:
            refused = reply
            break
        admitted_tokens += reply.json()["usage"]["total_tokens"]
        assert reply.headers["x-ratelimit-limit-tokens"] == "200"
    assert refused is not None
    assert refused.status == 429
    assert "tokens per minute" in refused.json()["error"]["message"]
    reservation = 20 + 20  # max_tokens plus a generous prompt estimate
    assert admitted_tokens <= 200 + reservation
    assert admitted_tokens >= 200 - reservation  # settling gave back what was not used


def test_unused_reservation_is_given_back(gateway: Gateway) -> None:
    key = gateway.new_key(tpm=1000)
    first = _chat(gateway, key["key"], max_tokens=900, headers={"x-fake-tokens": "5"})
    assert first.status == 200
    # 900 were reserved but about 6 used: the next large request fits once settled.
    second = _chat(gateway, key["key"], max_tokens=900, headers={"x-fake-tokens": "5"})
    assert second.status == 200
    assert int(second.headers["x-ratelimit-remaining-tokens"]) < 100


def test_concurrency_limit_admits_exactly_that_many_at_once(gateway: Gateway) -> None:
    key = gateway.new_key(max_concurrency=4)
    slow = {"x-fake-tokens": "5", "x-fake-token-delay-ms": "150"}
    with concurrent.futures.ThreadPoolExecutor(max_workers=12) as pool:
        replies = list(pool.map(lambda _: _chat(gateway, key["key"], headers=slow), range(12)))
    statuses = sorted(r.status for r in replies)
    assert statuses == [200] * 4 + [429] * 8
    assert any("concurrent requests" in r.json()["error"]["message"] for r in replies if r.status == 429)
    # Slots are released when requests end.
    assert _chat(gateway, key["key"]).status == 200


def test_a_spent_budget_is_429_insufficient_quota(gateway: Gateway) -> None:
    team = _team(gateway, daily_tokens=60)
    key = gateway.new_key(team=team)
    statuses = []
    for _ in range(6):
        reply = _chat(gateway, key["key"], max_tokens=10, headers={"x-fake-tokens": "10"})
        statuses.append(reply.status)
        if reply.status == 429:
            error = reply.json()["error"]
            assert error["type"] == "insufficient_quota"
            assert error["code"] == "insufficient_quota"
            assert "daily tokens" in error["message"]
            break
    assert statuses[0] == 200
    assert statuses[-1] == 429


def test_per_model_limits_apply_to_that_model_only(gateway: Gateway) -> None:
    key = gateway.new_key(model_limits={OTHER_MODEL: {"rpm": 1}})
    assert _chat(gateway, key["key"], OTHER_MODEL).status == 200
    refused = _chat(gateway, key["key"], OTHER_MODEL)
    assert refused.status == 429
    assert f"on model {OTHER_MODEL}" in refused.json()["error"]["message"]
    assert _chat(gateway, key["key"], FAKE_MODEL).status == 200


def test_limit_changes_take_effect_at_once_and_bad_values_are_400(gateway: Gateway) -> None:
    team = _team(gateway)
    key = gateway.new_key(team=team)
    assert _chat(gateway, key["key"]).status == 200
    gateway.admin.call("PATCH", f"/admin/v1/teams/{team}", {"rpm": 1})
    assert _chat(gateway, key["key"]).status == 200  # the first of this minute under the new limit
    assert _chat(gateway, key["key"]).status == 429
    updated = gateway.admin.call("PATCH", f"/admin/v1/teams/{team}", {"clear": ["rpm"]})
    assert updated["limits"] == {}
    assert _chat(gateway, key["key"]).status == 200
    bad = post(f"{gateway.url}/admin/v1/keys", {"team": team, "tpm_counts": "some"}, key=gateway.admin_token)
    assert bad.status == 400
    assert bad.json()["error"]["param"] == "tpm_counts"
    bad = post(f"{gateway.url}/admin/v1/keys", {"team": team, "max_concurrency": 0}, key=gateway.admin_token)
    assert bad.json()["error"]["param"] == "max_concurrency"
