"""The key store's single-key steps (gateway/keys/steps.py) attacked from the side: one write run
fully at each step of another, on one Redis and on a Redis Cluster, asserting what a client or an
admin can see: no secret of a deleted team that authenticates under a team re-created with its
name, no key of a living team missing from its listing, nothing left behind that lives forever.

A companion of tests/integration/test_key_store_steps.py (its checkpoint seam, its outlook; the
helpers both use are in tests/integration/key_store_checkpoints.py).
"""

from __future__ import annotations

import secrets
from typing import TypeVar

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.errors import ErrorCode
from gateway.keys.store import KeyRecord, KeyStore, hash_secret
from gateway.limits.spec import LimitSet
from gateway.redis import keys as redis_keys
from tests.integration.key_store_checkpoints import Journal, RunAt, authenticates, outcome
from tests.redis_cluster import RedisClusterNodes, run_with_client

pytestmark = pytest.mark.also_on_cluster

T = TypeVar("T")
Client = Redis | RedisCluster
RedisServer = EmbeddedRedis | RedisClusterNodes


def _name() -> str:
    return "a" + secrets.token_hex(4)


async def _legacy_key(redis: Client, store: KeyStore, team: str) -> tuple[KeyRecord, str]:
    """A key as one made before key records named their team's id: every key of a deployment
    that upgrades to this store looks so."""
    key, secret = await store.create_key(team)
    await redis.hdel(redis_keys.key_by_hash(hash_secret(secret)), "team_id")
    assert (await store.lookup(hash_secret(secret)) or key).team_id is None
    return key, secret


_TEAM_DELETE_STEPS = 7  # with one key: revoke, expire, record, members, unlist, publish, journal


def test_a_key_from_before_team_ids_rotated_during_its_teams_deletion_dies_with_the_team(
    redis_server: RedisServer,
) -> None:
    """A rotation that runs after the deletion read the key's secret, and before it marked it,
    makes a new secret the deletion never sees. A key that names its team's id dies all the
    same; one from before ids must not live on under a team made again with the name."""

    async def scenario(redis: Client) -> int:
        store = KeyStore(redis)
        handed_out = 0
        for at in range(_TEAM_DELETE_STEPS):
            await store.create_team(team := _name())
            key, old = await _legacy_key(redis, store, team)
            rotated: list[str] = []

            async def rotate(key_id: str = key.id, rotated: list[str] = rotated) -> None:
                done, code = await outcome(store.rotate(key_id, 3600, journal=Journal()))
                assert code in (None, ErrorCode.KEY_NOT_FOUND)
                rotated.extend([done[1]] if done is not None else [])

            deleting = RunAt(at, rotate)
            await KeyStore(redis, checkpoint=deleting).delete_team(team, journal=Journal())
            assert deleting.count >= _TEAM_DELETE_STEPS  # one more mark when it finds a new secret
            await store.create_team(team)
            assert not await authenticates(store, old), at
            assert not any([await authenticates(store, s) for s in rotated]), at
            handed_out += len(rotated)
        return handed_out

    assert run_with_client(redis_server.url, scenario) > 0  # the race was met


def test_a_rotation_gives_a_key_from_before_team_ids_its_teams_id(redis_server: RedisServer) -> None:
    """So its new secret dies with the team like any other key's, whatever the deletion saw."""

    async def scenario(redis: Client) -> tuple[str | None, str | None]:
        store = KeyStore(redis)
        await store.create_team(team := _name())
        key, _ = await _legacy_key(redis, store, team)
        _, new = await store.rotate(key.id, 60)
        record, info = await store.lookup(hash_secret(new)), await store.team_info(team)
        return record.team_id if record else None, info.id if info else None

    team_id, expected = run_with_client(redis_server.url, scenario)
    assert team_id is not None
    assert team_id == expected


def test_a_key_of_a_team_made_again_during_the_old_ones_deletion_is_listed_and_deleted_with_it(
    redis_server: RedisServer,
) -> None:
    """The deletion's last steps must not remove what the team made again under the name owns:
    its key set (a key missing from it is missing from every listing, and from the next deletion's
    revocations) and its keys' last use."""

    async def scenario(redis: Client) -> int:
        store = KeyStore(redis)
        made_again = 0
        for at in range(_TEAM_DELETE_STEPS):
            await store.create_team(team := _name())
            await store.create_key(team)
            made: list[tuple[KeyRecord, str]] = []

            async def again(team: str = team, made: list[tuple[KeyRecord, str]] = made) -> None:
                _, code = await outcome(store.create_team(team))
                assert code in (None, ErrorCode.TEAM_EXISTS)
                if code is None:
                    made.append(await store.create_key(team))
                    await redis.hset(redis_keys.key_last_used(team), made[-1][0].id, "1700000000.0")

            await KeyStore(redis, checkpoint=RunAt(at, again)).delete_team(team, journal=None)
            for key, secret in made:
                assert await authenticates(store, secret), at
                assert [k.id for k in await store.list_keys(team)] == [key.id], at
                assert [k.id for k in await store.list_all_keys() if k.team == team] == [key.id], at
                assert (await store.key(key.id)).last_used_at == 1700000000.0, at
                assert await store.delete_team(team, journal=None) == [key.id], at
                assert not await authenticates(store, secret), at
            made_again += len(made)
        return made_again

    assert run_with_client(redis_server.url, scenario) > 0


def test_a_key_rotated_during_its_teams_deletion_leaves_no_record_that_lives_forever(
    redis_server: RedisServer,
) -> None:
    """The new secret never authenticates (its record names the deleted team's id), but its
    record is neither revoked nor given a TTL: one such record stays per race, for good."""

    async def scenario(redis: Client) -> list[int]:
        store = KeyStore(redis)
        await store.create_team(team := _name())
        key, _ = await store.create_key(team)
        rotated: list[str] = []

        async def rotate() -> None:
            rotated.append((await store.rotate(key.id, 3600, journal=Journal()))[1])

        await KeyStore(redis, checkpoint=RunAt(0, rotate)).delete_team(team, journal=None)
        return [await redis.ttl(redis_keys.key_by_hash(hash_secret(s))) for s in rotated]

    ttls = run_with_client(redis_server.url, scenario)
    assert ttls
    assert all(ttl > 0 for ttl in ttls)


def test_a_key_made_during_its_teams_deletion_leaves_no_record_that_lives_forever(
    redis_server: RedisServer,
) -> None:
    """A deletion that runs between create_key's team check and its PERSISTs marks the record
    revoked with a TTL and gives the pointer one; the PERSISTs then take both away again."""

    async def scenario(redis: Client) -> tuple[int, int]:
        store = KeyStore(redis)
        await store.create_team(team := _name())

        async def delete() -> None:
            await store.delete_team(team, journal=None)

        # Steps: create, point, list, check_team, journal, keep_pointer, keep.
        key, secret = await KeyStore(redis, checkpoint=RunAt(5, delete)).create_key(team, journal=Journal())
        assert not await authenticates(store, secret)
        stored = redis_keys.key_by_hash(hash_secret(secret))
        return await redis.ttl(stored), await redis.ttl(redis_keys.key_hash_by_id(key.id))

    record_ttl, pointer_ttl = run_with_client(redis_server.url, scenario)
    assert record_ttl > 0
    assert pointer_ttl > 0


def test_a_secret_on_a_long_grace_stays_revocable_after_a_rotation_with_a_short_one(
    redis_server: RedisServer,
) -> None:
    """Revoking a key finds its retired secrets through their set: a later rotation with a
    shorter grace must not make that set go before the first one's old secret stops working
    (else, once it has gone, revoking the key leaves that secret working to the end of its
    grace)."""

    async def scenario(redis: Client) -> tuple[int, int]:
        store = KeyStore(redis)
        await store.create_team(team := _name())
        key, first = await store.create_key(team)
        await store.rotate(key.id, 90 * 86400)  # `first` keeps working for 90 days
        await store.rotate(key.id, 0)
        return (
            await redis.ttl(redis_keys.retired_key_hashes(key.id)),
            await redis.ttl(redis_keys.key_by_hash(hash_secret(first))),
        )

    retired_ttl, first_ttl = run_with_client(redis_server.url, scenario)
    assert first_ttl > 90 * 86400
    assert retired_ttl >= first_ttl


def test_a_key_rotated_often_keeps_no_retired_secret_whose_record_has_gone(redis_server: RedisServer) -> None:
    """Each rotation lists the old secret as retired, and each keeps the set alive: a key
    rotated daily would list every secret it ever had, and each revocation would mark them all."""

    async def scenario(redis: Client) -> tuple[set[str], set[str]]:
        store = KeyStore(redis)
        await store.create_team(team := _name())
        key, first = await store.create_key(team)
        _, second = await store.rotate(key.id, 0)
        _, third = await store.rotate(key.id, 0)
        # What their records' TTLs (grace and a day's slack) do in time.
        for secret in (first, second):
            await redis.delete(redis_keys.key_by_hash(hash_secret(secret)))
        await store.rotate(key.id, 0)
        retired = {redis_keys.as_text(h) for h in await redis.smembers(redis_keys.retired_key_hashes(key.id))}
        return retired, {hash_secret(third)}

    retired, alive = run_with_client(redis_server.url, scenario)
    assert retired == alive


def test_a_rotation_that_loses_every_try_to_updates_says_busy_not_that_the_key_is_gone(
    redis_server: RedisServer,
) -> None:
    """Each update landing between a rotation's copy and its grace step makes it go again; one
    that gives up must not answer 404 for a key that is there (the admin would think it gone)."""

    async def scenario(redis: Client) -> tuple[ErrorCode | None, bool]:
        store = KeyStore(redis)
        await store.create_team(team := _name())
        key, _ = await store.create_key(team)
        updates = 0

        async def update_before_each_grace(step: str) -> None:
            nonlocal updates
            if step == "rotate.grace":
                updates += 1
                await store.update_key(key.id, LimitSet(rpm=updates), set())

        rotating = KeyStore(redis, checkpoint=update_before_each_grace)
        _, code = await outcome(rotating.rotate(key.id, 60))
        return code, (await store.key(key.id)).limits == LimitSet(rpm=updates)

    code, kept = run_with_client(redis_server.url, scenario)
    assert code == ErrorCode.SERVER_BUSY
    assert kept
