"""`GET /v1/key/info` through a real gateway and Redis: a key sees its own fields, its limits and
its team's, what remains of each (going down as it is used, never spent by looking), and its usage;
never its secret, never another team's numbers."""

from __future__ import annotations

import hashlib
import http.client
import json
from typing import Any
from urllib.parse import urlsplit

import openai
import pytest
import redis

from gateway.dev.embedded_redis import EmbeddedRedis
from tests.conftest import FAKE_MODEL, OTHER_MODEL, Gateway, GatewayFactory
from tests.http import Reply, get, post
from tests.waiting import wait_until

HI = [{"role": "user", "content": "hi"}]


def _info(gw: Gateway, key: str) -> dict[str, Any]:
    reply = get(f"{gw.url}/v1/key/info", key=key)
    assert reply.status == 200, reply.body
    body: dict[str, Any] = reply.json()
    return body


def _chat(gw: Gateway, key: str, model: str = FAKE_MODEL) -> Reply:
    return post(
        f"{gw.url}/v1/chat/completions",
        {"model": model, "messages": HI, "max_tokens": 10},
        key=key,
        headers={"x-fake-tokens": "10"},
    )


def test_a_key_sees_itself_and_never_its_secret(gateway: Gateway) -> None:
    team = gateway.new_team()
    gateway.admin.call("PATCH", f"/admin/v1/teams/{team}", {"rpm": 100, "monthly_tokens": 5000})
    key = gateway.new_key(team=team, name="ci", models=[FAKE_MODEL], rpm=10, expires_at="2099-01-01")
    reply = get(f"{gateway.url}/v1/key/info", key=key["key"])
    info = reply.json()
    assert info["object"] == "key_info"
    assert (info["id"], info["name"], info["team"]) == (key["id"], "ci", team)
    assert info["models"] == [FAKE_MODEL]
    assert info["expires_at"] == 4070908800.0
    assert info["limits"] == {"key": {"rpm": 10}, "team": {"rpm": 100, "monthly_tokens": 5000}}
    assert info["remaining"]["key"] == {"rpm": {"limit": 10, "remaining": 10, "full_in_s": 0}}
    assert info["remaining"]["team"]["monthly_tokens"]["remaining"] == 5000
    assert info["usage"]["today"]["requests"] == 0
    assert key["key"].encode() not in reply.body
    assert hashlib.sha256(key["key"].encode()).hexdigest().encode() not in reply.body


def test_remaining_values_go_down_with_use_and_not_with_looking(gateway: Gateway) -> None:
    team = gateway.new_team()
    gateway.admin.call("PATCH", f"/admin/v1/teams/{team}", {"daily_tokens": 10_000, "max_concurrency": 5})
    # rpm 2 refills one request per 30 s: far slower than this test runs on any machine.
    key = gateway.new_key(team=team, rpm=2, monthly_tokens=1000)
    for _ in range(5):
        _info(gateway, key["key"])  # looking spends nothing: not the rpm of 2
    assert _chat(gateway, key["key"]).status == 200
    info = _info(gateway, key["key"])
    used = info["usage"]["today"]["total_tokens"]
    assert info["usage"]["today"]["requests"] == 1
    assert used > 0
    assert info["usage"]["this_month"]["total_tokens"] == used
    assert info["remaining"]["key"]["rpm"]["remaining"] == 1
    assert info["remaining"]["key"]["monthly_tokens"] == {
        "limit": 1000,
        "remaining": 1000 - used,  # settled: what the request used, not what it reserved
        "used": used,
        "resets_in_s": info["remaining"]["key"]["monthly_tokens"]["resets_in_s"],
    }
    assert info["remaining"]["team"]["daily_tokens"]["remaining"] == 10_000 - used
    assert info["remaining"]["team"]["max_concurrency"] == {"limit": 5, "remaining": 5, "in_use": 0}
    # Looking again changes nothing a budget or a concurrency count holds.
    again = _info(gateway, key["key"])["remaining"]
    assert again["key"]["monthly_tokens"]["remaining"] == 1000 - used
    assert again["team"]["daily_tokens"]["remaining"] == 10_000 - used


def test_a_key_near_its_rpm_sees_it_and_the_next_request_agrees(gateway: Gateway) -> None:
    key = gateway.new_key(rpm=2)
    assert [_chat(gateway, key["key"]).status for _ in range(2)] == [200, 200]
    info = _info(gateway, key["key"])
    assert info["remaining"]["key"]["rpm"]["remaining"] == 0
    assert info["remaining"]["key"]["rpm"]["full_in_s"] > 0
    assert _chat(gateway, key["key"]).status == 429


def test_reading_writes_nothing_to_redis(gateway: Gateway, redis_client: redis.Redis) -> None:
    team = gateway.new_team()
    gateway.admin.call(
        "PATCH",
        f"/admin/v1/teams/{team}",
        {"tpm": 1000, "daily_tokens": 100, "model_limits": {FAKE_MODEL: {"rpm": 3}}},
    )
    key = gateway.new_key(team=team, rpm=5, max_concurrency=2, daily_tokens=50)
    info = _info(gateway, key["key"])
    assert info["remaining"]["team"]["models"] == {
        FAKE_MODEL: {"rpm": {"limit": 3, "remaining": 3, "full_in_s": 0}}
    }
    assert info["remaining"]["key"]["max_concurrency"] == {"limit": 2, "remaining": 2, "in_use": 0}
    # No limit state was created for the team: the read-only script wrote nothing.
    assert list(redis_client.scan_iter(match=f"sg:{{t:{team}}}:rl:*")) == []


def test_another_teams_numbers_never_show(gateway: Gateway) -> None:
    mine, theirs = gateway.new_team(), gateway.new_team()
    gateway.admin.call("PATCH", f"/admin/v1/teams/{theirs}", {"rpm": 77, "daily_tokens": 7777})
    key = gateway.new_key(team=mine)
    mate = gateway.new_key(team=mine)
    other = gateway.new_key(team=theirs, rpm=55)
    for k in (mate, other, other):
        assert _chat(gateway, k["key"], OTHER_MODEL).status == 200
    reply = get(f"{gateway.url}/v1/key/info", key=key["key"])
    info = reply.json()
    assert info["usage"]["today"]["requests"] == 0  # not the team mate's, not the other team's
    assert info["limits"] == {"key": {}, "team": {}}
    assert info["remaining"] == {"key": {}, "team": {}}
    for foreign in (theirs, other["id"], mate["id"]):
        assert foreign.encode() not in reply.body


def test_a_bad_key_is_401_in_the_openai_envelope(gateway: Gateway) -> None:
    reply = get(f"{gateway.url}/v1/key/info", key="sk-sg-not-a-key")
    assert reply.status == 401
    assert reply.json()["error"]["code"] == "invalid_api_key"
    revoked = gateway.new_key()
    gateway.admin.call("DELETE", f"/admin/v1/keys/{revoked['id']}")
    refused = get(f"{gateway.url}/v1/key/info", key=revoked["key"])
    assert refused.status == 401
    assert "revoked" in refused.json()["error"]["message"]


def test_the_openai_sdk_reads_it(gateway: Gateway) -> None:
    key = gateway.new_key(rpm=9)
    client = gateway.client(key["key"])
    info = client.get("/key/info", cast_to=object)
    assert isinstance(info, dict)
    assert info["remaining"]["key"]["rpm"]["remaining"] == 9
    with pytest.raises(openai.AuthenticationError):
        gateway.client("sk-sg-wrong").get("/key/info", cast_to=object)


def test_concurrency_in_use_shows_a_request_in_flight(gateway: Gateway) -> None:
    key = gateway.new_key(max_concurrency=3)
    parts = urlsplit(gateway.url)
    assert parts.hostname is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        # The worker holds this answer until the client leaves: the slot is held until then.
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=json.dumps({"model": FAKE_MODEL, "messages": HI}),
            headers={"authorization": f"Bearer {key['key']}", "x-fake-stall": "1"},
        )

        def in_use() -> int:
            state: dict[str, int] = _info(gateway, key["key"])["remaining"]["key"]["max_concurrency"]
            return state["in_use"]

        wait_until(lambda: in_use() == 1, 10, "the held request's slot shown in use")
        assert _info(gateway, key["key"])["remaining"]["key"]["max_concurrency"]["remaining"] == 2
    finally:
        conn.close()  # the client leaves: the gateway cancels the request and frees its slot
    wait_until(lambda: in_use() == 0, 10, "the slot freed once the client left")


def test_redis_down_is_a_503_in_the_envelope(make_gateway: GatewayFactory) -> None:
    with EmbeddedRedis() as own, make_gateway(redis_url=own.url) as gw:
        key = gw.new_key()
        assert _info(gw, key["key"])["id"] == key["id"]
        own.stop()
        reply = get(f"{gw.url}/v1/key/info", key=key["key"])
        assert reply.status == 503
        assert reply.json()["error"]["code"] == "redis_unavailable"
