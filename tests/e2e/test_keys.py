"""Key lifecycle across replicas: revocation, rotation with grace, expiry. The replicas here cache
keys for 30 s, so only the invalidation feed can make them notice in time."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest

from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory
from tests.http import Reply, post

BODY = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "hi"}]}


def _ask(gw: Gateway, key: str) -> Reply:
    return post(f"{gw.url}/v1/chat/completions", BODY, key=key)


# The replicas cache a key for 30 s (the fixture's key_cache_ttl_s): a key that stops working
# within this bound was stopped by what the test is about (the invalidation feed, a grace or an
# expiry read from the cached record), never by the cache's expiry. Wide, so that a busy machine
# cannot fail it.
BEFORE_THE_CACHE_EXPIRES_S = 15.0


def _status_within(gw: Gateway, key: str, status: int, since: float | None = None) -> None:
    """Waits until `key` gets `status` on `gw`; fails BEFORE_THE_CACHE_EXPIRES_S after `since`
    (default: now)."""
    started = time.monotonic() if since is None else since
    while (reply := _ask(gw, key)).status != status:
        elapsed = time.monotonic() - started
        assert elapsed < BEFORE_THE_CACHE_EXPIRES_S, f"still {reply.status} after {elapsed:.1f} s"
        time.sleep(0.02)


@pytest.fixture
def replicas(make_gateway: GatewayFactory) -> Iterator[list[Gateway]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(make_gateway(key_cache_ttl_s=30)) for _ in range(3)]


def test_revocation_on_one_replica_stops_the_key_on_all_before_their_caches_expire(
    replicas: list[Gateway],
) -> None:
    first, *others = replicas
    key = first.new_key()
    for gw in replicas:
        assert _ask(gw, key["key"]).status == 200  # now cached everywhere
    first.admin.call("DELETE", f"/admin/v1/keys/{key['id']}")
    revoked_at = time.monotonic()
    for gw in others:  # every replica's bound counts from the revocation
        _status_within(gw, key["key"], 401, since=revoked_at)
    assert "revoked" in _ask(others[0], key["key"]).json()["error"]["message"]


def test_rotation_keeps_the_old_secret_for_its_grace_then_stops_it(replicas: list[Gateway]) -> None:
    first, second, _ = replicas
    key = first.new_key()
    assert _ask(second, key["key"]).status == 200
    rotated_at = time.monotonic()
    rotated = first.admin.call("POST", f"/admin/v1/keys/{key['id']}/rotate", {"grace_seconds": 1.5})
    first.secrets_created.append(rotated["key"])
    assert rotated["id"] == key["id"]
    assert rotated["key"] != key["key"]
    assert _ask(second, rotated["key"]).status == 200
    # Within the grace it still works (a machine so slow that the grace is over by now may see 401).
    assert _ask(second, key["key"]).status == 200 or time.monotonic() - rotated_at >= 1.5
    _status_within(second, key["key"], 401)
    # The grace began after rotated_at, so the old secret cannot have stopped before 1.5 s from
    # it (a slow machine only makes this later; 0.05 s for the two processes' clocks' reading).
    assert time.monotonic() - rotated_at >= 1.45
    assert "expired" in _ask(second, key["key"]).json()["error"]["message"]
    assert _ask(second, rotated["key"]).status == 200
    # One key in the listing, not two.
    assert [k["id"] for k in first.admin.call("GET", "/admin/v1/keys", team=key["team"])["data"]] == [
        key["id"]
    ]


def test_revoking_a_rotated_key_also_stops_the_secret_in_its_grace(replicas: list[Gateway]) -> None:
    first, second, _ = replicas
    key = first.new_key()
    rotated = first.admin.call("POST", f"/admin/v1/keys/{key['id']}/rotate", {"grace_seconds": 3600})
    first.secrets_created.append(rotated["key"])
    assert _ask(second, key["key"]).status == 200
    first.admin.call("DELETE", f"/admin/v1/keys/{key['id']}")
    _status_within(second, key["key"], 401)
    _status_within(second, rotated["key"], 401)


def test_a_key_stops_at_its_expiry_even_while_cached(replicas: list[Gateway]) -> None:
    first, second, _ = replicas
    expires_at = time.time() + 2.0
    key = first.new_key(expires_at=expires_at)
    assert key["expires_at"] is not None
    assert _ask(second, key["key"]).status == 200 or time.time() >= expires_at  # now cached
    _status_within(second, key["key"], 401)
    assert "expired" in _ask(second, key["key"]).json()["error"]["message"]


def test_expiry_and_grace_are_validated(gateway: Gateway) -> None:
    team = gateway.new_team()
    bad = post(
        f"{gateway.url}/admin/v1/keys",
        {"team": team, "expires_at": "next tuesday"},
        key=gateway.admin_token,
    )
    assert bad.status == 400
    assert bad.json()["error"]["param"] == "expires_at"
    dated = gateway.new_key(team=team, expires_at="2099-01-01")
    assert dated["expires_at"] == pytest.approx(4070908800.0)
    grace = post(
        f"{gateway.url}/admin/v1/keys/{dated['id']}/rotate", {"grace_seconds": -1}, key=gateway.admin_token
    )
    assert grace.status == 400
    missing = post(f"{gateway.url}/admin/v1/keys/key_nope/rotate", {}, key=gateway.admin_token)
    assert missing.status == 404
