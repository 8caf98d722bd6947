"""KeyStore's day-2 operations against a real Redis: show a team, delete it (every key revoked,
every replica told), list every key, change a key's models and expiry, refuse to change a revoked
key."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.errors import ErrorCode, GatewayError
from gateway.keys.store import KeyStore, hash_secret
from gateway.limits.spec import NO_LIMITS, LimitSet
from gateway.redis import keys as redis_keys
from gateway.redis.client import close_redis
from tests.redis_cluster import async_client

# Every test runs on one Redis and on a Redis Cluster (tests/conftest.py).
pytestmark = pytest.mark.also_on_cluster

T = TypeVar("T")


def _run(redis_url: str, scenario: Callable[[KeyStore, Redis | RedisCluster], Awaitable[T]]) -> T:
    async def main() -> T:
        redis = async_client(redis_url)
        try:
            return await scenario(KeyStore(redis), redis)
        finally:
            await close_redis(redis)

    return asyncio.run(main())


def _name() -> str:
    return "t" + secrets.token_hex(4)


class _Journal:
    """Records what the store wrote down."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, dict[str, Any], dict[str, Any]]] = []

    async def write(self, action: str, *, team: str, key_id: str | None = None, **change: Any) -> None:
        self.entries.append((action, dict(change["before"]), dict(change["after"])))


def test_team_shows_its_fields_and_teams_lists_them_all(redis_server: EmbeddedRedis) -> None:
    name = _name()

    async def scenario(
        store: KeyStore, redis: Redis | RedisCluster
    ) -> tuple[dict[str, object], list[dict[str, object]]]:
        await store.create_team(name, LimitSet(rpm=5, daily_tokens=100))
        return await store.team(name), await store.teams()

    team, teams = _run(redis_server.url, scenario)
    assert team["name"] == name
    assert team["limits"] == {"rpm": 5, "daily_tokens": 100}
    assert isinstance(team["created_at"], float)
    assert team["created_at"] <= time.time()
    assert team in teams


def test_an_unknown_team_is_team_not_found(redis_server: EmbeddedRedis) -> None:
    async def scenario(store: KeyStore, redis: Redis | RedisCluster) -> None:
        await store.team(_name())

    with pytest.raises(GatewayError) as caught:
        _run(redis_server.url, scenario)
    assert caught.value.code is ErrorCode.TEAM_NOT_FOUND


def test_deleting_a_team_revokes_every_secret_and_tells_every_replica(redis_server: EmbeddedRedis) -> None:
    name, other = _name(), _name()
    forgotten: list[str] = []
    journal = _Journal()

    async def scenario(store: KeyStore, redis: Redis | RedisCluster) -> dict[str, Any]:
        await store.create_team(name)
        await store.create_team(other)
        first, first_secret = await store.create_key(name)
        second, old_secret = await store.create_key(name)
        # A rotation in its grace leaves the old secret alive: deleting must stop it too.
        _, new_secret = await store.rotate(second.id, 3600)
        kept, kept_secret = await store.create_key(other)
        pubsub = redis.pubsub()
        await pubsub.subscribe(redis_keys.KEY_INVALIDATIONS)
        await pubsub.get_message(timeout=1)  # the subscribe confirmation
        revoked = await store.delete_team(name, journal=journal, forget=forgotten.append)
        published = set()
        while (message := await pubsub.get_message(timeout=1)) is not None:
            published.add(redis_keys.as_text(message["data"]))
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        records = {s: await store.lookup(hash_secret(s)) for s in (first_secret, old_secret, new_secret)}
        return {
            "ids": sorted([first.id, second.id]),
            "revoked": revoked,
            "published": published,
            "records": records,
            "kept": await store.lookup(hash_secret(kept_secret)),
            "kept_id": kept.id,
            "teams": await store.list_teams(),
            "exists": await store.team_exists(name),
            "hashes": {hash_secret(s) for s in (first_secret, old_secret, new_secret)},
            "ttl": await redis.ttl(redis_keys.key_by_hash(hash_secret(first_secret))),
            "members": await redis.exists(redis_keys.team_keys(name)),
        }

    out = _run(redis_server.url, scenario)
    assert out["revoked"] == out["ids"]
    assert all(r is not None and r.revoked for r in out["records"].values())
    assert out["hashes"] <= out["published"]
    assert f"team:{name}" in out["published"]
    assert out["hashes"] | {f"team:{name}"} == set(forgotten)
    assert out["kept"] is not None
    assert not out["kept"].revoked
    assert name not in out["teams"]
    assert other in out["teams"]
    assert not out["exists"]
    assert not out["members"]
    assert 0 < out["ttl"] <= 24 * 3600  # the revoked records go, a day later
    assert journal.entries == [
        ("team.deleted", {"keys": out["ids"]}, {"revoked_keys": out["ids"]}),
    ]


def test_a_deleted_team_takes_no_new_keys_and_its_name_can_be_used_again(redis_server: EmbeddedRedis) -> None:
    name = _name()

    async def scenario(store: KeyStore, redis: Redis | RedisCluster) -> tuple[ErrorCode, list[str], object]:
        await store.create_team(name, LimitSet(rpm=1))
        await store.create_key(name)
        await store.delete_team(name, journal=None)
        try:
            await store.create_key(name)
        except GatewayError as exc:
            code = exc.code
        await store.create_team(name)
        return code, [k.id for k in await store.list_keys(name)], (await store.team(name))["limits"]

    code, keys, limits = _run(redis_server.url, scenario)
    assert code is ErrorCode.TEAM_NOT_FOUND
    assert keys == []  # the old team's keys do not come back with its name
    assert limits == {}  # nor its limits


def test_list_all_keys_lists_every_team(redis_server: EmbeddedRedis) -> None:
    a, b = _name(), _name()

    async def scenario(store: KeyStore, redis: Redis | RedisCluster) -> tuple[set[str], set[str]]:
        await store.create_team(a)
        await store.create_team(b)
        made = {(await store.create_key(team))[0].id for team in (a, b, a)}
        return made, {k.id for k in await store.list_all_keys()}

    made, listed = _run(redis_server.url, scenario)
    assert made <= listed


def test_update_key_changes_models_and_expiry_and_keeps_what_it_is_not_given(
    redis_server: EmbeddedRedis,
) -> None:
    name = _name()
    later = time.time() + 3600
    journal = _Journal()

    async def scenario(store: KeyStore, redis: Redis | RedisCluster) -> list[Any]:
        await store.create_team(name)
        key, secret = await store.create_key(name, models=["a"], limits=LimitSet(rpm=3))
        narrowed = await store.update_key(key.id, NO_LIMITS, set(), models=["b", "c"], expires_at=later)
        limits_only = await store.update_key(key.id, LimitSet(tpm=9), set(), journal=journal)
        widened = await store.update_key(key.id, NO_LIMITS, set(), models=None, expires_at=None)
        return [narrowed, limits_only, widened, await store.lookup(hash_secret(secret))]

    narrowed, limits_only, widened, stored = _run(redis_server.url, scenario)
    assert narrowed.models == frozenset({"b", "c"})
    assert narrowed.expires_at == later
    assert narrowed.limits == LimitSet(rpm=3)
    assert limits_only.models == frozenset({"b", "c"})
    assert limits_only.expires_at == later
    assert limits_only.limits == LimitSet(rpm=3, tpm=9)
    assert widened.models is None
    assert widened.expires_at is None
    assert stored == widened  # what the gateway reads is what the update returned
    assert journal.entries[0][1]["models"] == ["b", "c"]
    assert journal.entries[0][2]["tpm"] == 9


def test_a_revoked_key_cannot_be_updated(redis_server: EmbeddedRedis) -> None:
    name = _name()

    async def scenario(store: KeyStore, redis: Redis | RedisCluster) -> GatewayError:
        await store.create_team(name)
        key, _ = await store.create_key(name)
        await store.revoke(key.id)
        try:
            await store.update_key(key.id, LimitSet(rpm=1), set())
        except GatewayError as exc:
            return exc
        raise AssertionError("updated a revoked key")

    error = _run(redis_server.url, scenario)
    assert error.code is ErrorCode.KEY_REVOKED
    assert error.code.status == 409
    assert "revoked" in error.message
