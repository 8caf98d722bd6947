"""The admin audit log against a real gateway and a real Redis: every admin change leaves exactly
one entry (action, team, key id, old -> new, address), never a secret; the listing's filters,
paging and refusals; the bound on the stream; a change Redis refuses leaves neither change nor
entry; and `sluicegate audit`."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, cast

import pytest
import redis

from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.redis import keys as redis_keys
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory

STREAM = redis_keys.audit_log()
# On one Redis and on a Redis Cluster (tests/conftest.py); the tests that start their own Redis
# (to bound or starve it) run on one Redis only.
ON_BOTH = pytest.mark.also_on_cluster


def _call(
    gw: Gateway, method: str, path: str, body: dict[str, Any] | None = None, *, token: str | None = None
) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(gw.url + path, data=data, method=method)  # noqa: S310
    request.add_header("content-type", "application/json")
    request.add_header("authorization", f"Bearer {gw.admin_token if token is None else token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def _audit(gw: Gateway, **query: Any) -> dict[str, Any]:
    status, body = _call(gw, "GET", "/admin/v1/audit?" + urllib.parse.urlencode(query))
    assert status == 200, body
    result: dict[str, Any] = body
    return result


def _raw(redis_client: redis.Redis) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """Every entry as stored, oldest first (the client does not decode)."""
    return cast(list[tuple[bytes, dict[bytes, bytes]]], redis_client.xrange(STREAM))


def _stream(redis_client: redis.Redis, team: str) -> list[dict[str, str]]:
    """The team's entries as stored, oldest first, every field decoded."""
    out = []
    for _, fields in _raw(redis_client):
        entry = {k.decode(): v.decode() for k, v in fields.items()}
        if entry["team"] == team:
            out.append(entry)
    return out


@ON_BOTH
def test_every_admin_change_leaves_one_entry_with_what_changed(
    gateway: Gateway, redis_client: redis.Redis
) -> None:
    team = "audit-" + os.urandom(4).hex()
    started_ms = int(time.time() * 1000)
    gw = gateway
    assert _call(gw, "POST", "/admin/v1/teams", {"name": team, "rpm": 100})[0] == 201
    update = {"tpm": 5000, "weight": 3, "clear": ["rpm"], "model_limits": {FAKE_MODEL: {"rpm": 7}}}
    assert _call(gw, "PATCH", f"/admin/v1/teams/{team}", update)[0] == 200
    key = gw.new_key(team, models=[FAKE_MODEL], rpm=10, expires_at="2099-01-01")
    assert _call(gw, "PATCH", f"/admin/v1/keys/{key['id']}", {"rpm": 20, "tpm": 900})[0] == 200
    status, rotated = _call(gw, "POST", f"/admin/v1/keys/{key['id']}/rotate", {"grace_seconds": 60})
    assert status == 200
    gw.secrets_created.append(rotated["key"])
    assert _call(gw, "DELETE", f"/admin/v1/keys/{key['id']}")[0] == 200
    # A refused change leaves nothing.
    assert _call(gw, "PATCH", f"/admin/v1/teams/{team}", {"rpm": 0})[0] == 400

    stored = _stream(redis_client, team)
    assert [e["action"] for e in stored] == [
        "team.created",
        "team.updated",
        "key.created",
        "key.updated",
        "key.rotated",
        "key.revoked",
    ]
    assert {e["peer"] for e in stored} == {"127.0.0.1"}
    assert [e["key_id"] for e in stored] == ["", "", key["id"], key["id"], key["id"], key["id"]]
    changes = [json.loads(e["changes"]) for e in stored]
    assert changes[0] == {"rpm": [None, 100]}
    assert changes[1] == {
        "rpm": [100, None],
        "tpm": [None, 5000],
        "weight": [None, 3],
        f"model_limits.{FAKE_MODEL}": [None, {"rpm": 7}],
    }
    assert changes[2] == {
        "name": [None, ""],
        "models": [None, [FAKE_MODEL]],
        "rpm": [None, 10],
        "expires_at": [None, 4070908800.0],
    }
    assert changes[3] == {"rpm": [10, 20], "tpm": [None, 900]}
    assert changes[4]["grace_seconds"] == [None, 60.0]
    old_expiry, new_expiry = changes[4]["previous_secret_expires_at"]
    assert old_expiry == 4070908800.0
    assert started_ms / 1000 + 60 - 5 < new_expiry <= time.time() + 60
    revoked_before, revoked_at = changes[5]["revoked_at"]
    assert revoked_before is None
    assert started_ms / 1000 - 1 < revoked_at <= time.time()

    # The API shows the same entries, newest first, with Redis's time.
    listed = _audit(gw, team=team)
    assert listed["has_more"] is False
    assert [e["action"] for e in listed["data"]] == [e["action"] for e in reversed(stored)]
    assert [e["changes"] for e in listed["data"]] == list(reversed(changes))
    newest = listed["data"][0]
    assert newest["team"] == team
    assert newest["key_id"] == key["id"]
    assert newest["time"].endswith("Z")
    assert int(newest["id"].split("-")[0]) >= started_ms - 1000  # Redis's clock, same machine
    assert listed["data"][-1]["key_id"] is None

    # Revoking again is still an action an admin took: one more entry, and nothing changed.
    assert _call(gw, "DELETE", f"/admin/v1/keys/{key['id']}")[0] == 200
    again = _audit(gw, team=team, limit=1)["data"][0]
    assert again["action"] == "key.revoked"
    assert again["changes"] == {}


@ON_BOTH
def test_no_secret_anywhere_in_the_stream(gateway: Gateway, redis_client: redis.Redis) -> None:
    team = gateway.new_team()
    key = gateway.new_key(team, name="ci key", rpm=5)
    status, rotated = _call(gateway, "POST", f"/admin/v1/keys/{key['id']}/rotate", {"grace_seconds": 5})
    assert status == 200
    gateway.secrets_created.append(rotated["key"])
    _call(gateway, "DELETE", f"/admin/v1/keys/{key['id']}")
    secrets = [*gateway.secrets_created, gateway.admin_token]
    forbidden = [*secrets, *(hashlib.sha256(s.encode()).hexdigest() for s in secrets)]
    entries = _raw(redis_client)
    assert len(entries) >= 4
    for entry_id, fields in entries:
        for text in (entry_id, *fields, *fields.values()):
            value = text.decode()
            assert not any(secret in value for secret in forbidden), value
            assert "sk-sg-" not in value


def test_address_behind_a_trusted_proxy_is_the_client(make_gateway: GatewayFactory) -> None:
    with make_gateway(trusted_proxies=("127.0.0.1/32",)) as gw:
        team = "audit-" + os.urandom(4).hex()
        request = urllib.request.Request(  # noqa: S310
            gw.url + "/admin/v1/teams", data=json.dumps({"name": team}).encode(), method="POST"
        )
        request.add_header("authorization", f"Bearer {gw.admin_token}")
        request.add_header("x-forwarded-for", "203.0.113.9, 198.51.100.7")
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            assert response.status == 201
        (entry,) = _audit(gw, team=team)["data"]
        assert entry["peer"] == "198.51.100.7"  # the nearest hop the trusted proxy saw
    with make_gateway() as gw:
        request = urllib.request.Request(  # noqa: S310
            gw.url + "/admin/v1/teams", data=json.dumps({"name": team + "-x"}).encode(), method="POST"
        )
        request.add_header("authorization", f"Bearer {gw.admin_token}")
        request.add_header("x-forwarded-for", "203.0.113.9")
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            assert response.status == 201
        (entry,) = _audit(gw, team=team + "-x")["data"]
        assert entry["peer"] == "127.0.0.1"  # an untrusted peer's claim is ignored


@ON_BOTH
def test_filters_paging_and_refusals(gateway: Gateway) -> None:
    mine, other = gateway.new_team(), gateway.new_team()
    for rpm in range(1, 6):
        gateway.admin.call("PATCH", f"/admin/v1/teams/{mine}", {"rpm": rpm})
        gateway.admin.call("PATCH", f"/admin/v1/teams/{other}", {"rpm": rpm})

    everything = _audit(gateway, team=mine)["data"]
    assert len(everything) == 6
    assert {e["team"] for e in everything} == {mine}
    assert [e["changes"].get("rpm") for e in everything[:5]] == [[4, 5], [3, 4], [2, 3], [1, 2], [None, 1]]

    # limit, has_more, and `before` for the next page: the pages join up with nothing twice.
    first = _audit(gateway, team=mine, limit=4)
    assert first["has_more"] is True
    assert first["data"] == everything[:4]
    second = _audit(gateway, team=mine, limit=4, before=first["data"][-1]["id"])
    assert second["has_more"] is False
    assert second["data"] == everything[4:]
    unfiltered = _audit(gateway, limit=2)["data"]
    assert [e["team"] for e in unfiltered] == [other, mine]

    # since: an entry's own millisecond and later; Unix seconds or ISO 8601.
    third_ms = int(everything[2]["id"].split("-")[0])
    since = _audit(gateway, team=mine, since=str(third_ms / 1000))["data"]
    assert since == [e for e in everything if int(e["id"].split("-")[0]) >= third_ms]
    assert everything[2] in since
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(third_ms // 1000)) + f".{third_ms % 1000:03d}Z"
    assert _audit(gateway, team=mine, since=iso)["data"] == since
    assert _audit(gateway, team=mine, since="2099-01-01")["data"] == []
    assert _audit(gateway, team="never-existed")["data"] == []

    bad = {
        "limit": ["0", "1001", "abc", "", "1.5", "-1", " 5"],
        "since": ["yesterday", "nan", "-5", "99999999999999", "2026-13-01"],
        "before": ["abc", "1-2-3", "99999999999999999999-0"],
        "team": ["Not Valid!"],
    }
    for param, values in bad.items():
        for value in values:
            status, body = _call(gateway, "GET", "/admin/v1/audit?" + urllib.parse.urlencode({param: value}))
            assert status == 400, (param, value, body)
            assert body["error"]["param"] == ("team" if param == "team" else param), body


@ON_BOTH
def test_concurrent_updates_chain_old_to_new_without_a_lost_update(gateway: Gateway) -> None:
    team = gateway.new_team()
    key = gateway.new_key(team)

    def patch(n: int) -> None:
        gateway.admin.call("PATCH", f"/admin/v1/teams/{team}", {"rpm": n})
        gateway.admin.call("PATCH", f"/admin/v1/keys/{key['id']}", {"tpm": n})

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(patch, range(1, 25)))
    entries = list(reversed(_audit(gateway, team=team, limit=1000)["data"]))
    last: dict[str, object] = {}
    for action, field in (("team.updated", "rpm"), ("key.updated", "tpm")):
        chain = [e["changes"][field] for e in entries if e["action"] == action]
        assert len(chain) == 24
        # Each update's old value is the one another update wrote: from none, following old to
        # new visits every update once, so none was lost. (An entry is a step after its change,
        # docs/api.md "Admin writes, step by step": entries of updates made at the same moment
        # may be listed in either order.)
        following = {old: new for old, new in chain}
        assert len(following) == 24, chain
        value, seen = None, []
        while value in following:
            value = following[value]
            seen.append(value)
        assert sorted(seen) == list(range(1, 25)), chain
        last[field] = value
    (listed,) = gateway.admin.call("GET", "/admin/v1/keys", team=team)["data"]
    assert listed["limits"]["tpm"] == last["tpm"]


def test_the_listing_needs_the_admin_token(gateway: Gateway) -> None:
    assert _call(gateway, "GET", "/admin/v1/audit", token="")[0] == 401
    status, body = _call(gateway, "GET", "/admin/v1/audit", token="x" * 40)
    assert status == 401
    assert body["error"]["code"] == "admin_unauthorized"


def test_the_stream_is_bounded(make_gateway: GatewayFactory) -> None:
    # Trimming is approximate (MAXLEN ~): Redis drops whole stream nodes, 100 entries each by
    # default, so the stream stays below the bound plus one node.
    with EmbeddedRedis() as server, make_gateway(redis_url=server.url, audit_max_entries=10) as gw:
        team = gw.new_team()
        for rpm in range(1, 300):
            gw.admin.call("PATCH", f"/admin/v1/teams/{team}", {"rpm": rpm})
        client = redis.Redis.from_url(server.url)
        try:
            length = client.xlen(STREAM)
        finally:
            client.close()
        assert 10 <= length <= 10 + 100
        newest = _audit(gw, team=team, limit=1)["data"][0]
        assert newest["changes"] == {"rpm": [298, 299]}


def test_a_change_redis_refuses_leaves_neither_change_nor_entry(make_gateway: GatewayFactory) -> None:
    with EmbeddedRedis() as server, make_gateway(redis_url=server.url) as gw:
        team = gw.new_team()
        client = redis.Redis.from_url(server.url)
        try:
            before = client.xlen(STREAM)
            # Out of memory: Redis refuses every write queued in the transaction, so EXEC runs none.
            client.config_set("maxmemory-policy", "noeviction")
            client.config_set("maxmemory", "1")
            try:
                status, body = _call(gw, "PATCH", f"/admin/v1/teams/{team}", {"rpm": 9})
                key_status, _ = _call(gw, "POST", "/admin/v1/keys", {"team": team})
            finally:
                client.config_set("maxmemory", "0")
            assert status == 503, body
            assert body["error"]["code"] == "redis_unavailable"
            assert key_status == 503
            assert client.xlen(STREAM) == before
            assert json.loads(client.hget(redis_keys.team(team), "limits") or b"{}") == {}
            assert client.scard(redis_keys.team_keys(team)) == 0
        finally:
            client.close()
        assert gw.admin.call("GET", "/admin/v1/keys", team=team)["data"] == []


@ON_BOTH
def test_cli_lists_the_audit_log(gateway: Gateway) -> None:
    team = gateway.new_team()
    gateway.admin.call("PATCH", f"/admin/v1/teams/{team}", {"rpm": 5, "tpm": 100})
    key = gateway.new_key(team, name="line\nbreak\x1b[31m", rpm=3)
    env = {**os.environ, "SLUICEGATE_URL": gateway.url, "SLUICEGATE_ADMIN_TOKEN": gateway.admin_token}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gateway", "audit", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            check=False,
        )

    table = cli("--team", team)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["time", "actor", "action", "team", "key_id", "changes", "peer"]
    assert len(lines) == 4
    assert "admin token" in lines[1]  # the break-glass token made the key
    assert "key.created" in lines[1]
    assert key["id"] in lines[1]
    assert "\x1b" not in table.stdout  # a key's name cannot drive the operator's terminal
    assert "team.updated" in lines[2]
    assert "rpm: - -> 5, tpm: - -> 100" in lines[2]
    assert "127.0.0.1" in lines[2]
    assert key["key"] not in table.stdout

    limited = cli("--team", team, "--limit", "1", "--json")
    assert limited.returncode == 0, limited.stderr
    (entry,) = json.loads(limited.stdout)
    assert entry["action"] == "key.created"
    assert f"--before {entry['id']}" in limited.stderr
    bad = cli("--limit", "0")
    assert bad.returncode == 1
    assert "HTTP 400" in bad.stderr
    assert "example: sluicegate audit --team ml" in cli("--help").stdout
