"""The admin API against a caller who sends what it should not: names with a trailing newline,
expiry times already past, key ids that name other Redis keys, and guessed admin tokens; and the
one client-side limit the admin surface sets on proxied requests, `n`/`best_of` reservations.

Real gateways (uvicorn on loopback), real redis-server; the throttle's memory bound and lockout end
are checked on the class itself with a counter clock, since waiting out a lockout is a race."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest

from gateway.admin.throttle import AdminThrottle
from gateway.config import Settings
from gateway.errors import ConfigError
from gateway.model_file import parse_model_table
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory, worker_record
from tests.http import Reply, post


def _call(
    gw: Gateway, method: str, path: str, body: Any = None, *, token: str | None = None, **headers: str
) -> Reply:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{gw.url}{path}", data=data, method=method)  # noqa: S310
    request.add_header("content-type", "application/json")
    request.add_header("authorization", f"Bearer {gw.admin_token if token is None else token}")
    for name, value in headers.items():
        request.add_header(name.replace("_", "-"), value)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return Reply(
                response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
            )
    except urllib.error.HTTPError as exc:
        with exc:
            return Reply(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read())


def _refused(reply: Reply, status: int, code: str, param: str | None = None) -> dict[str, Any]:
    assert reply.status == status, reply.body
    error: dict[str, Any] = reply.json()["error"]
    assert error["code"] == code
    if param is not None:
        assert error["param"] == param
    return error


# --- names: a trailing newline is not the same name -------------------------------------------


def test_a_team_name_with_a_trailing_newline_is_refused_not_created_as_a_twin(gateway: Gateway) -> None:
    team = gateway.new_team()
    _refused(_call(gateway, "POST", "/admin/v1/teams", {"name": team + "\n"}), 400, "invalid_request", "name")
    _refused(_call(gateway, "POST", "/admin/v1/keys", {"team": team + "\n"}), 400, "invalid_request", "team")
    # Percent-encoded, it is refused before routing (no route needs an encoded path).
    _refused(_call(gateway, "PATCH", f"/admin/v1/teams/{team}%0A", {"rpm": 1}), 400, "invalid_request")
    listed = [t["name"] for t in gateway.admin.call("GET", "/admin/v1/teams")["data"]]
    assert listed.count(team) == 1
    assert team + "\n" not in listed


def test_a_model_name_with_a_trailing_newline_is_refused(gateway: Gateway) -> None:
    team = gateway.new_team()
    reply = _call(gateway, "POST", "/admin/v1/keys", {"team": team, "models": [FAKE_MODEL + "\n"]})
    _refused(reply, 400, "invalid_request", "models")
    with pytest.raises(ConfigError, match="name"):
        parse_model_table({"models": [{"name": "m\n", "endpoints": ["http://127.0.0.1:1"]}]})


# --- expiry: a time already past makes a dead key ---------------------------------------------


@pytest.mark.parametrize("expires_at", [1, "0001-01-01", "2001-01-01T00:00:00Z", "past"])
def test_an_expiry_in_the_past_is_refused(gateway: Gateway, expires_at: Any) -> None:
    team = gateway.new_team()
    when = time.time() - 60 if expires_at == "past" else expires_at
    error = _refused(
        _call(gateway, "POST", "/admin/v1/keys", {"team": team, "expires_at": when}),
        400,
        "invalid_request",
        "expires_at",
    )
    assert "past" in error["message"]
    assert gateway.admin.call("GET", "/admin/v1/keys", team=team)["data"] == []


# --- key ids: only ids, never another Redis key -----------------------------------------------


@pytest.mark.also_on_cluster  # on one Redis and on a Redis Cluster (tests/conftest.py)
def test_a_key_id_that_names_another_redis_key_is_404_not_503(gateway: Gateway) -> None:
    key = gateway.new_key()
    rotated = gateway.admin.call("POST", f"/admin/v1/keys/{key['id']}/rotate", {"grace_seconds": 600})
    gateway.secrets_created.append(rotated["key"])
    # sg:keyid:<id>:retired is a SET now; the id names it when the gateway adds its prefix.
    for bad_id in (f"{key['id']}:retired", f"{key['id']}!", "key_nope"):
        for method, path, body in (
            ("PATCH", f"/admin/v1/keys/{bad_id}", {"rpm": 1}),
            ("DELETE", f"/admin/v1/keys/{bad_id}", None),
            ("POST", f"/admin/v1/keys/{bad_id}/rotate", {}),
        ):
            _refused(_call(gateway, method, path, body), 404, "key_not_found", "key_id")
    # The real key is untouched by all of that.
    record = gateway.admin.call("GET", "/admin/v1/keys", team=key["team"])["data"][0]
    assert (record["id"], record["revoked"], record["limits"]) == (key["id"], False, {})


# --- the admin token: length, throttle, log ---------------------------------------------------


def test_a_short_admin_token_stops_the_start_naming_the_variable_not_the_value() -> None:
    with pytest.raises(ConfigError, match="SLUICEGATE_ADMIN_TOKEN") as raised:
        Settings.from_env({"SLUICEGATE_ADMIN_TOKEN": "hunter2-is-secret"})
    assert "hunter2" not in str(raised.value)
    assert Settings.from_env({"SLUICEGATE_ADMIN_TOKEN": "x" * 32}).admin_token == "x" * 32


def test_wrong_admin_tokens_are_throttled_per_address_and_logged_without_the_value(
    make_gateway: GatewayFactory, all_logs: list[str]
) -> None:
    # Loopback is a trusted proxy here, so X-Forwarded-For gives each caller its own address.
    with make_gateway(admin_max_failures=3, trusted_proxies=("127.0.0.1",)) as gw:
        guesser, operator = {"x_forwarded_for": "203.0.113.7"}, {"x_forwarded_for": "198.51.100.1"}
        guesses = [f"guess-{i}-" + "g" * 32 for i in range(3)]
        gw.secrets_created.extend(guesses)
        for guess in guesses:
            _refused(_call(gw, "GET", "/admin/v1/teams", token=guess, **guesser), 401, "admin_unauthorized")
        # Now a wrong token from that address is throttled, says when to come back, and is not logged.
        for _ in range(5):
            locked = _call(gw, "GET", "/admin/v1/models", token=guesses[0], **guesser)
            _refused(locked, 429, "admin_throttled")
            assert int(locked.headers["retry-after"]) > 0
        # Another address is not.
        assert _call(gw, "GET", "/admin/v1/teams", **operator).status == 200
    rejected = [line for line in all_logs if "admin token rejected" in line]
    assert len(rejected) == 3
    assert all("peer=203.0.113.7" in line and "path=/admin/v1/teams" in line for line in rejected)
    assert not [line for line in all_logs if any(guess in line for guess in guesses)]


def test_guessers_sharing_the_admins_address_cannot_lock_the_admin_out(make_gateway: GatewayFactory) -> None:
    # Behind a NAT or an ingress everyone has one address: the guesses and the admin's calls come
    # from the same peer here. The right token is never refused, and the guesses stay throttled.
    with make_gateway(admin_max_failures=3) as gw:
        guesses = [f"guess-{i}-" + "g" * 32 for i in range(10)]
        gw.secrets_created.extend(guesses)
        statuses = [_call(gw, "GET", "/admin/v1/teams", token=guess).status for guess in guesses]
        assert statuses == [401] * 3 + [429] * 7
        assert _call(gw, "GET", "/admin/v1/teams").status == 200
        team = gw.new_team()
        assert _call(gw, "POST", "/admin/v1/keys", {"team": team}).status == 201
        # The admin's success does not hand the guessers fresh tries.
        _refused(_call(gw, "GET", "/admin/v1/teams", token=guesses[0]), 429, "admin_throttled")


def test_the_throttle_forgets_a_lockout_after_its_time_and_holds_a_bounded_number_of_addresses() -> None:
    now = [0.0]
    throttle = AdminThrottle(
        max_failures=2, window_s=10, lockout_s=30, max_addresses=100, clock=lambda: now[0]
    )
    throttle.failed("a")
    assert throttle.retry_after("a") is None
    throttle.failed("a")
    assert throttle.retry_after("a") == 30
    now[0] = 29.5
    assert throttle.retry_after("a") == 1
    now[0] = 30.0
    assert throttle.retry_after("a") is None
    for i in range(10_000):
        throttle.failed(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
    assert len(throttle) == 100


# --- reservations: every answer asked for is reserved -----------------------------------------


def _chat(gw: Gateway, key: str, **fields: Any) -> Reply:
    body = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "hi"}], **fields}
    return post(f"{gw.url}/v1/chat/completions", body, key=key, headers={"x-fake-tokens": "3"})


def test_n_and_best_of_reserve_one_completion_cap_per_answer(gateway: Gateway, fake_worker: str) -> None:
    key = gateway.new_key(tpm=500)
    # 8 answers of up to 100 tokens: 800 reserved, more than the limit allows at once, so each
    # answer gets the same share of what it does allow, and the worker that cap.
    bounded = _chat(gateway, key["key"], max_tokens=100, n=8)
    assert bounded.status == 200, bounded.body
    per_answer = int(bounded.headers["x-sluicegate-max-tokens"])
    assert bounded.headers["x-sluicegate-max-tokens-limited-by"] == "tokens_per_minute"
    assert per_answer >= 16
    assert per_answer * 8 < 500
    record = worker_record(fake_worker, bounded.headers["x-request-id"])
    assert record is not None
    assert record["body"]["max_tokens"] == per_answer
    completions = post(
        f"{gateway.url}/v1/completions",
        {"model": FAKE_MODEL, "prompt": "hi", "max_tokens": 100, "n": 1, "best_of": 8},
        key=gateway.new_key(tpm=500)["key"],
    )
    assert completions.status == 200, completions.body
    assert int(completions.headers["x-sluicegate-max-tokens"]) * 8 < 500


@pytest.mark.parametrize(("name", "value"), [("n", 0), ("n", 129), ("best_of", True), ("best_of", 0)])
def test_n_and_best_of_must_be_sane_positive_integers(gateway: Gateway, name: str, value: Any) -> None:
    key = gateway.new_key()
    _refused(_chat(gateway, key["key"], **{name: value}), 400, "invalid_request", name)
