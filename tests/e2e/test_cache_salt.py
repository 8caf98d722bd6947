"""Per-team `cache_salt` (gateway/proxy/cache_salt.py): what every generation request a real
gateway sends the fake worker carries (the fake records each body), for every client API and
path, translated and native; that a client's own salt only narrows its team's scope; and that the
salt reaches no client, log line or metric. The engine side (no cross-team hit on a real vLLM) is
tests/vllm/test_vllm_cache_salt.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from gateway.keys.store import hash_secret
from gateway.model_table import NATIVE, ModelConfig, ModelTable, Protocols
from gateway.proxy.cache_salt import derive
from gateway.redis import keys
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory, SessionLog, default_table, worker_record
from tests.http import Reply, get, post

SECRET = "salt-secret-" + "x" * 32
NATIVE_MODEL = "salted-native"
KEY_MODEL = "salted-per-key"
SHARED_MODEL = "salted-shared"
CHAT = {"messages": [{"role": "user", "content": "hello there gateway"}], "max_tokens": 4}


def _table(worker: str) -> ModelTable:
    extra = (
        ModelConfig(
            name=NATIVE_MODEL,
            upstream_model=FAKE_MODEL,
            endpoints=(worker,),
            protocols=Protocols(messages=NATIVE, responses=NATIVE),
        ),
        ModelConfig(name=KEY_MODEL, upstream_model=FAKE_MODEL, endpoints=(worker,), cache_isolation="key"),
        ModelConfig(
            name=SHARED_MODEL, upstream_model=FAKE_MODEL, endpoints=(worker,), cache_isolation="shared"
        ),
    )
    return ModelTable((*default_table(worker).models, *extra))


@pytest.fixture(scope="module")
def gw(make_gateway_module: GatewayFactory, fake_worker: str) -> Iterator[Gateway]:
    with make_gateway_module(_table(fake_worker), cache_salt_secret=SECRET) as gateway:
        yield gateway


def _team_id(redis_client: redis.Redis, team: str) -> str:
    raw = redis_client.hget(keys.team(team), "id")
    assert raw, "a team is given an id when it is made"
    return keys.as_text(raw)


def _sent(gw: Gateway, worker: str, path: str, body: dict[str, Any], key: str) -> tuple[Reply, Any]:
    """The reply, and the cache_salt the worker got (None: none was sent)."""
    reply = post(gw.url + path, body, key=key)
    assert reply.status == 200, reply.body
    record = worker_record(worker, reply.headers["x-sluicegate-request-id"])
    assert record is not None
    return reply, record["body"].get("cache_salt", None)


# Every path a generation request takes: (path, body); each API translated and native.
GENERATION: list[tuple[str, dict[str, Any]]] = [
    ("/v1/chat/completions", {"model": FAKE_MODEL, **CHAT}),
    ("/v1/chat/completions", {"model": FAKE_MODEL, **CHAT, "stream": True}),
    ("/v1/completions", {"model": FAKE_MODEL, "prompt": "hello there", "max_tokens": 4}),
    ("/v1/completions", {"model": FAKE_MODEL, "prompt": "hello there", "max_tokens": 4, "stream": True}),
    ("/v1/messages", {"model": FAKE_MODEL, **CHAT}),
    ("/v1/messages", {"model": FAKE_MODEL, **CHAT, "stream": True}),
    ("/v1/messages", {"model": NATIVE_MODEL, **CHAT}),
    ("/v1/messages", {"model": NATIVE_MODEL, **CHAT, "stream": True}),
    ("/v1/responses", {"model": FAKE_MODEL, "input": "hello there", "max_output_tokens": 4}),
    ("/v1/responses", {"model": FAKE_MODEL, "input": "hello there", "max_output_tokens": 4, "stream": True}),
    (
        "/v1/responses",
        {"model": NATIVE_MODEL, "input": "hello there", "max_output_tokens": 4, "store": False},
    ),
    (f"/v1beta/models/{FAKE_MODEL}:generateContent", {"contents": [{"parts": [{"text": "hello there"}]}]}),
]


def test_every_api_and_path_carries_the_teams_salt_and_no_answer_shows_it(
    gw: Gateway, fake_worker: str, redis_client: redis.Redis
) -> None:
    team = gw.new_team()
    key = gw.new_key(team)["key"]
    expected = derive(SECRET.encode(), "team", team_id=_team_id(redis_client, team), key_id="", client=None)
    assert expected is not None
    assert len(expected) <= 128
    for path, body in GENERATION:
        reply, salt = _sent(gw, fake_worker, path, body, key)
        assert salt == expected, (path, body)
        assert expected not in reply.body.decode(), path
        assert expected not in str(reply.headers), path
    # A second key of the team shares the team's cache; embeddings get no salt at all.
    other_key = gw.new_key(team)["key"]
    assert _sent(gw, fake_worker, *GENERATION[0], other_key)[1] == expected
    embeddings = {"model": FAKE_MODEL, "input": "hello", "cache_salt": "mine"}
    assert _sent(gw, fake_worker, "/v1/embeddings", embeddings, key)[1] is None


def test_teams_get_different_salts_and_a_re_created_team_a_new_one(
    gw: Gateway, fake_worker: str, redis_client: redis.Redis
) -> None:
    team = gw.new_team()
    first = _sent(gw, fake_worker, *GENERATION[0], gw.new_key(team)["key"])[1]
    other = _sent(gw, fake_worker, *GENERATION[0], gw.new_key()["key"])[1]
    assert first != other
    gw.admin.call("DELETE", f"/admin/v1/teams/{team}")
    gw.admin.call("POST", "/admin/v1/teams", {"name": team})
    again = _sent(gw, fake_worker, *GENERATION[0], gw.new_key(team)["key"])[1]
    assert again not in (first, None)


def test_a_clients_salt_only_narrows_its_teams_scope(
    gw: Gateway, fake_worker: str, redis_client: redis.Redis
) -> None:
    team_a, team_b = gw.new_team(), gw.new_team()
    key_a, key_b = gw.new_key(team_a)["key"], gw.new_key(team_b)["key"]
    salt_a = _sent(gw, fake_worker, *GENERATION[0], key_a)[1]
    user_1 = {"model": FAKE_MODEL, **CHAT, "cache_salt": "user-1"}
    narrowed = _sent(gw, fake_worker, "/v1/chat/completions", user_1, key_a)[1]
    assert narrowed not in (salt_a, "user-1", None)
    assert _sent(gw, fake_worker, "/v1/chat/completions", user_1, key_a)[1] == narrowed
    # Team B sending team A's exact salt (or A's narrowed one) reaches neither.
    for stolen in (salt_a, narrowed):
        for path, body in (GENERATION[0], GENERATION[6], GENERATION[10]):
            got = _sent(gw, fake_worker, path, {**body, "cache_salt": stolen}, key_b)[1]
            assert got not in (salt_a, narrowed, stolen, None), path
            team_b_id = _team_id(redis_client, team_b)
            assert got == derive(SECRET.encode(), "team", team_id=team_b_id, key_id="", client=stolen)


@pytest.mark.parametrize("salt", ["", "a" * 129, "a/b", "a@b", "a\\b", "a\x00b", 5, "é"])
def test_a_bad_client_salt_is_a_400_in_the_apis_envelope(gw: Gateway, salt: object) -> None:
    key = gw.new_key()["key"]
    for path, body in (GENERATION[0], GENERATION[6], GENERATION[10]):
        reply = post(gw.url + path, {**body, "cache_salt": salt}, key=key)
        assert reply.status == 400, (path, reply.body)
        error = reply.json()["error"]
        assert "cache_salt" in error["message"]
        assert error["type"] == "invalid_request_error"


def test_key_isolation_gives_each_key_its_own_and_shared_none(gw: Gateway, fake_worker: str) -> None:
    team = gw.new_team()
    keys_ = [gw.new_key(team)["key"] for _ in range(2)]
    per_key = [
        _sent(gw, fake_worker, "/v1/chat/completions", {"model": KEY_MODEL, **CHAT}, k)[1] for k in keys_
    ]
    per_team = [_sent(gw, fake_worker, *GENERATION[0], k)[1] for k in keys_]
    assert per_key[0] != per_key[1]
    assert None not in per_key
    assert per_team[0] == per_team[1]
    assert per_team[0] not in per_key
    # Shared: no salt, so every team shares the engine's cache; a client salt is still mixed.
    assert (
        _sent(gw, fake_worker, "/v1/chat/completions", {"model": SHARED_MODEL, **CHAT}, keys_[0])[1] is None
    )
    shared = {"model": SHARED_MODEL, **CHAT, "cache_salt": "public"}
    got = [
        _sent(gw, fake_worker, "/v1/chat/completions", shared, k)[1] for k in (keys_[0], gw.new_key()["key"])
    ]
    assert got[0] == got[1]
    assert got[0] not in ("public", None)


def test_two_replicas_derive_the_same_salt_with_or_without_the_setting(
    make_gateway: GatewayFactory, fake_worker: str, redis_client: redis.Redis
) -> None:
    redis_client.delete(keys.CACHE_SALT_SECRET)
    team = ""
    salts = []
    for secret in (SECRET, SECRET, None, None):
        with make_gateway(_table(fake_worker), cache_salt_secret=secret) as gateway:
            team = team or gateway.new_team()
            salts.append(_sent(gateway, fake_worker, *GENERATION[0], gateway.new_key(team)["key"])[1])
    assert salts[0] == salts[1]
    assert salts[2] == salts[3]
    assert salts[0] != salts[2]  # the minted secret is another secret
    assert redis_client.get(keys.CACHE_SALT_SECRET)


def test_the_salt_is_in_no_log_line_or_metric_and_metrics_can_want_a_token(
    make_gateway: GatewayFactory, fake_worker: str, session_log: SessionLog
) -> None:
    token = "metrics-" + "m" * 32
    with make_gateway(_table(fake_worker), cache_salt_secret=SECRET, metrics_token=token) as gateway:
        key = gateway.new_key()["key"]
        salts = {_sent(gateway, fake_worker, path, body, key)[1] for path, body in GENERATION}
        assert get(gateway.url + "/metrics").status == 401
        assert get(gateway.url + "/metrics", key="wrong").status == 401
        metrics = get(gateway.url + "/metrics", key=token)
        assert metrics.status == 200
        assert b"sluicegate_" in metrics.body
    (salt,) = salts
    assert salt not in metrics.body.decode()
    assert not [line for line in session_log.lines if salt in line]


def test_an_existing_team_without_an_id_gets_one_once(gw: Gateway, redis_client: redis.Redis) -> None:
    team = gw.new_team()
    key = gw.new_key(team)["key"]
    redis_client.hdel(keys.team(team), "id")  # as a team made before ids existed
    redis_client.hdel(keys.key_by_hash(hash_secret(key)), "team_id")  # and its keys, before they named it
    assert post(gw.url + "/v1/chat/completions", {"model": FAKE_MODEL, **CHAT}, key=key).status == 200
    minted = _team_id(redis_client, team)
    assert post(gw.url + "/v1/chat/completions", {"model": FAKE_MODEL, **CHAT}, key=key).status == 200
    assert _team_id(redis_client, team) == minted


def test_a_re_created_team_reads_none_of_the_deleted_teams_stored_responses(gw: Gateway) -> None:
    team = gw.new_team()
    body = {"model": NATIVE_MODEL, "input": "hello there", "max_output_tokens": 4}
    created = post(gw.url + "/v1/responses", body, key=gw.new_key(team)["key"])
    assert created.status == 200, created.body
    response_id = created.json()["id"]
    assert get(f"{gw.url}/v1/responses/{response_id}", key=gw.new_key(team)["key"]).status == 200
    gw.admin.call("DELETE", f"/admin/v1/teams/{team}")
    gw.admin.call("POST", "/admin/v1/teams", {"name": team})
    heir = gw.new_key(team)["key"]
    assert get(f"{gw.url}/v1/responses/{response_id}", key=heir).status == 404
    follow = post(gw.url + "/v1/responses", {**body, "previous_response_id": response_id}, key=heir)
    assert follow.status == 404, follow.body
