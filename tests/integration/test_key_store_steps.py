"""Every key-store write stopped between any two of its single-key steps (a crash, a failed call),
or with another write run there, on one Redis and on a Redis Cluster (gateway/keys/steps.py).

What a client sees must stay safe at every stop: a secret is returned only by a creation or
rotation that finished; a key revoked (or whose team was deleted) never authenticates again,
whatever ran beside it; a secret an admin holds stays revocable; and the admin's retry finishes
the job. Whether a key authenticates is asked of the gateway's own Authenticator (no cache).
"""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.errors import ErrorCode, StoreUnavailable
from gateway.keys.store import KeyStore, hash_secret
from gateway.limits.spec import LimitSet
from gateway.redis import keys as redis_keys
from tests.integration.key_store_checkpoints import Journal, RunAt, authenticates, outcome
from tests.redis_cluster import RedisClusterNodes, run_with_client

pytestmark = pytest.mark.also_on_cluster

T = TypeVar("T")
Client = Redis | RedisCluster
RedisServer = EmbeddedRedis | RedisClusterNodes


class Stop(Exception):
    """Raised by a checkpoint: the write stops before the step it was about to run."""


class StopAt:
    """A checkpoint that raises before the write's step number `at` (from 0; None: never), and
    records the names of the steps it let run."""

    def __init__(self, at: int | None) -> None:
        self.at = at
        self.seen: list[str] = []

    async def __call__(self, step: str) -> None:
        if len(self.seen) == self.at:
            raise Stop(step)
        self.seen.append(step)


def _name() -> str:
    return "s" + secrets.token_hex(4)


async def _steps(write: Callable[[KeyStore], Awaitable[object]], redis: Client) -> list[str]:
    """The names of the steps `write` runs when nothing stops it."""
    recorder = StopAt(None)
    await write(KeyStore(redis, checkpoint=recorder))
    return recorder.seen


async def _records_of(redis: Client, field: bytes, value: str) -> list[tuple[dict[Any, Any], int]]:
    """Every stored key record whose `field` is `value`, with its TTL (-1: none). A test's own
    look: the store never scans."""
    found: list[tuple[dict[Any, Any], int]] = []
    async for name in redis.scan_iter(match=redis_keys.key_by_hash("*"), count=1000):
        raw = await redis.hgetall(name)
        if raw.get(field) == value.encode():
            found.append((raw, await redis.ttl(name)))
    return found


def test_a_key_creation_stopped_at_any_step_hands_out_nothing_and_leaves_nothing_to_use(
    redis_server: RedisServer,
) -> None:
    async def scenario(redis: Client) -> list[str]:
        store = KeyStore(redis)
        await store.create_team(first := _name())
        steps = await _steps(lambda s: s.create_key(first, journal=Journal()), redis)
        for at in range(len(steps)):
            team = _name()
            await store.create_team(team)
            with pytest.raises(Stop):
                await KeyStore(redis, checkpoint=StopAt(at)).create_key(team, journal=Journal())
            # Nobody holds the secret of what it wrote, and all of it goes by itself.
            records = await _records_of(redis, b"team", team)
            assert all(ttl > 0 for _, ttl in records), steps[at]
            # The admin's retry makes a whole key.
            _, secret = await store.create_key(team)
            assert await authenticates(store, secret)
        return steps

    steps = run_with_client(redis_server.url, scenario)
    assert steps == [
        "key.create",
        "key.point",
        "key.list",
        "key.check_team",
        "key.journal",
        "key.keep_pointer",
        "key.keep",
    ]


def test_a_key_creation_that_a_wrong_typed_key_fails_leaves_nothing_to_use(redis_server: RedisServer) -> None:
    """A real Redis failure, not a checkpoint: the team's key set is not a set."""
    team = _name()

    async def scenario(redis: Client) -> list[tuple[dict[Any, Any], int]]:
        store = KeyStore(redis)
        await store.create_team(team)
        await redis.set(redis_keys.team_keys(team), "not a set")
        try:
            # The store's one mapping: Redis's WRONGTYPE reply is the domain error, named by class.
            with pytest.raises(StoreUnavailable) as failed:
                await store.create_key(team)
        finally:
            await redis.delete(redis_keys.team_keys(team))  # other tests list every team
        assert failed.value.reason == "ResponseError"  # WRONGTYPE
        return await _records_of(redis, b"team", team)

    records = run_with_client(redis_server.url, scenario)
    assert len(records) == 1
    assert records[0][1] > 0


def test_a_rotation_stopped_at_any_step_keeps_every_secret_revocable(redis_server: RedisServer) -> None:
    async def scenario(redis: Client) -> list[str]:
        store = KeyStore(redis)
        await store.create_team(team := _name())
        key, _ = await store.create_key(team)
        steps = await _steps(lambda s: s.rotate(key.id, 3600, journal=Journal()), redis)
        expires_at = time.time() + 86400
        for at in range(len(steps)):
            key, old = await store.create_key(team, expires_at=expires_at)
            with pytest.raises(Stop):
                await KeyStore(redis, checkpoint=StopAt(at)).rotate(key.id, 3600, journal=Journal())
            assert await authenticates(store, old), steps[at]  # on its grace, at worst
            assert (await store.key(key.id)).id == key.id  # still found, still listed
            assert key.id in {k.id for k in await store.list_keys(team)}
            # The admin's retry rotates (the key's own expiry, not the grace's, on the new
            # secret); a revocation then stops every secret.
            _, new = await store.rotate(key.id, 3600)
            assert await authenticates(store, new)
            assert (await store.key(key.id)).expires_at == expires_at, steps[at]
            await store.revoke(key.id)
            assert not await authenticates(store, old)
            assert not await authenticates(store, new)
        return steps

    steps = run_with_client(redis_server.url, scenario)
    assert steps == [
        "rotate.create",
        "rotate.retire",
        "rotate.grace",
        "rotate.journal",
        "rotate.keep",
        "rotate.point",
        "rotate.check",
        "rotate.expire_retired",
    ]


def test_a_rotation_that_a_wrong_typed_key_fails_leaves_the_old_secret_as_it_was(
    redis_server: RedisServer,
) -> None:
    team = _name()

    async def scenario(redis: Client) -> tuple[bool, Any, list[tuple[dict[Any, Any], int]]]:
        store = KeyStore(redis)
        await store.create_team(team)
        key, old = await store.create_key(team)
        await redis.set(redis_keys.retired_key_hashes(key.id), "not a set")
        try:
            # The store's one mapping: Redis's WRONGTYPE reply is the domain error, named by class.
            with pytest.raises(StoreUnavailable) as failed:
                await store.rotate(key.id, 60)
        finally:
            await redis.delete(redis_keys.retired_key_hashes(key.id))
        assert failed.value.reason == "ResponseError"  # WRONGTYPE
        unfinished = [r for r in await _records_of(redis, b"id", key.id) if r[1] > 0]
        return await authenticates(store, old), (await store.lookup(hash_secret(old))), unfinished

    works, record, unfinished = run_with_client(redis_server.url, scenario)
    assert works
    assert record.expires_at is None  # no grace started
    assert len(unfinished) == 1  # the new secret's record, going by itself


def test_a_revocation_stopped_at_any_step_refuses_what_it_reached_and_a_retry_refuses_all(
    redis_server: RedisServer,
) -> None:
    async def scenario(redis: Client) -> list[str]:
        store = KeyStore(redis)
        await store.create_team(team := _name())

        async def rotated_twice() -> tuple[str, list[str]]:
            key, first = await store.create_key(team)
            _, second = await store.rotate(key.id, 3600)
            _, third = await store.rotate(key.id, 3600)
            return key.id, [third, *sorted((first, second), key=hash_secret)]  # the order it marks

        key_id, _ = await rotated_twice()
        steps = await _steps(lambda s: s.revoke(key_id, journal=Journal()), redis)
        for at in range(len(steps)):
            key_id, held = await rotated_twice()
            with pytest.raises(Stop):
                await KeyStore(redis, checkpoint=StopAt(at)).revoke(key_id, journal=Journal())
            reached = min(at, steps.count("revoke.mark"))
            assert [await authenticates(store, s) for s in held] == [False] * reached + [True] * (3 - reached)
            await store.revoke(key_id)
            assert not any([await authenticates(store, s) for s in held])
        return steps

    steps = run_with_client(redis_server.url, scenario)
    assert steps == ["revoke.mark"] * 3 + ["revoke.journal"]


def test_a_team_creation_stopped_at_any_step_is_listed_exactly_when_it_exists(
    redis_server: RedisServer,
) -> None:
    async def scenario(redis: Client) -> list[str]:
        store = KeyStore(redis)
        steps = await _steps(lambda s: s.create_team(_name(), journal=Journal()), redis)
        for at in range(len(steps)):
            name = _name()
            with pytest.raises(Stop):
                await KeyStore(redis, checkpoint=StopAt(at)).create_team(name, journal=Journal())
            assert (name in await store.list_teams()) == await store.team_exists(name), steps[at]
            _, code = await outcome(store.create_team(name))  # the admin's retry
            assert code in (None, ErrorCode.TEAM_EXISTS)
            assert name in await store.list_teams()
        return steps

    steps = run_with_client(redis_server.url, scenario)
    assert steps == ["team.list", "team.create", "team.relist", "team.journal"]


def test_a_team_deletion_stopped_at_any_step_is_finished_by_deleting_again(redis_server: RedisServer) -> None:
    async def scenario(redis: Client) -> list[str]:
        store = KeyStore(redis)

        async def team_with_keys() -> tuple[str, list[str]]:
            team = _name()
            await store.create_team(team, LimitSet(rpm=5))
            key, first = await store.create_key(team)
            _, second = await store.rotate(key.id, 3600)
            _, third = await store.create_key(team)
            return team, [first, second, third]

        team, _ = await team_with_keys()
        steps = await _steps(lambda s: s.delete_team(team, journal=Journal()), redis)
        for at in range(len(steps)):
            team, held = await team_with_keys()
            with pytest.raises(Stop):
                await KeyStore(redis, checkpoint=StopAt(at)).delete_team(team, journal=Journal())
            _, code = await outcome(store.delete_team(team, journal=None))  # the admin's retry
            assert code in (None, ErrorCode.TEAM_NOT_FOUND), steps[at]
            assert not any([await authenticates(store, s) for s in held]), steps[at]
            assert team not in await store.list_teams()
            assert not await store.team_exists(team)
            # A team made again under the name has none of the old one's keys or limits.
            await store.create_team(team)
            assert await store.list_keys(team) == []
            assert (await store.team(team))["limits"] == {}
            assert not any([await authenticates(store, s) for s in held])
        return steps

    steps = run_with_client(redis_server.url, scenario)
    # One pipeline marks all three secrets (gateway/keys/deletion.py: up to BATCH per step).
    assert steps == [
        "team_delete.revoke",
        "team_delete.expire",
        "team_delete.record",
        "team_delete.members",
        "team_delete.unlist",
        "team_delete.publish",
        "team_delete.journal",
    ]


def test_a_revocation_during_any_step_of_a_rotation_leaves_no_secret_alive(redis_server: RedisServer) -> None:
    async def scenario(redis: Client) -> int:
        store = KeyStore(redis)
        await store.create_team(team := _name())
        returned = 0
        for at in range(8):
            key, old = await store.create_key(team)
            rotating = KeyStore(redis, checkpoint=RunAt(at, functools.partial(_revoked, store, key.id)))
            rotated, code = await outcome(rotating.rotate(key.id, 3600, journal=Journal()))
            assert code in (None, ErrorCode.KEY_NOT_FOUND)  # as for any revoked key
            if rotated is not None:
                returned += 1
                assert not await authenticates(store, rotated[1]), at
            assert not await authenticates(store, old), at
            assert (await store.key(key.id)).revoked
        return returned

    # Most interleavings refuse the rotation; one (the revocation after the pointer moved and
    # was checked) returns a new secret, already revoked: both kinds were met.
    assert 0 < run_with_client(redis_server.url, scenario) < 8


async def _revoked(store: KeyStore, key_id: str) -> None:
    await store.revoke(key_id)


def test_a_team_deletion_during_any_step_of_a_key_creation_leaves_no_key_alive(
    redis_server: RedisServer,
) -> None:
    async def scenario(redis: Client) -> None:
        store = KeyStore(redis)
        for at in range(7):
            await store.create_team(team := _name())
            creating = KeyStore(redis, checkpoint=RunAt(at, functools.partial(_deleted, store, team)))
            created, code = await outcome(creating.create_key(team, journal=Journal()))
            assert code in (None, ErrorCode.TEAM_NOT_FOUND), at
            if created is None:
                continue
            assert not await authenticates(store, created[1]), at
            await store.create_team(team)  # nor under a team made again with the name
            assert not await authenticates(store, created[1]), at
            assert await store.list_keys(team) == []

    run_with_client(redis_server.url, scenario)


async def _deleted(store: KeyStore, team: str) -> None:
    await store.delete_team(team, journal=None)


def test_a_team_made_again_during_any_step_of_its_deletion_stays_listed(redis_server: RedisServer) -> None:
    async def scenario(redis: Client) -> int:
        store = KeyStore(redis)
        made = 0
        for at in range(9):
            await store.create_team(team := _name())
            await store.create_key(team)
            created: list[str] = []

            async def create_again(name: str = team, created: list[str] = created) -> None:
                made, code = await outcome(store.create_team(name))
                assert code in (None, ErrorCode.TEAM_EXISTS)
                if made is not None:
                    created.append(name)

            await KeyStore(redis, checkpoint=RunAt(at, create_again)).delete_team(team, journal=None)
            assert (team in await store.list_teams()) == await store.team_exists(team) == bool(created), at
            made += len(created)
        return made

    assert run_with_client(redis_server.url, scenario) > 0


def test_two_team_updates_at_once_lose_neither(redis_server: RedisServer) -> None:
    team = _name()

    async def scenario(redis: Client) -> object:
        store = KeyStore(redis)
        await store.create_team(team, LimitSet(rpm=1))

        async def other() -> None:
            await store.update_team(team, LimitSet(tpm=7), set(), journal=None)

        # The other update lands between this one's read and its write: this one reads again.
        await KeyStore(redis, checkpoint=RunAt(0, other)).update_team(team, LimitSet(rpm=2), set())
        return (await store.team(team))["limits"]

    assert run_with_client(redis_server.url, scenario) == {"rpm": 2, "tpm": 7}


def test_a_key_made_during_any_step_of_its_teams_deletion_dies_with_the_team(
    redis_server: RedisServer,
) -> None:
    """Made after the deletion read the team's keys, it is not revoked; it still never
    authenticates: its record names the deleted team's id, not a team made again under the name."""

    async def scenario(redis: Client) -> int:
        store = KeyStore(redis)
        handed_out = 0
        for at in range(7):
            await store.create_team(team := _name())
            await store.create_key(team)
            made: list[str] = []

            async def create_key(name: str = team, made: list[str] = made) -> None:
                created, code = await outcome(store.create_key(name))
                assert code in (None, ErrorCode.TEAM_NOT_FOUND)
                made.extend([created[1]] if created is not None else [])

            await KeyStore(redis, checkpoint=RunAt(at, create_key)).delete_team(team, journal=Journal())
            await store.create_team(team)
            assert not any([await authenticates(store, secret) for secret in made]), at
            handed_out += len(made)
        return handed_out

    assert run_with_client(redis_server.url, scenario) > 0


def test_a_revocation_that_a_wrong_typed_key_fails_has_refused_the_current_secret(
    redis_server: RedisServer,
) -> None:
    team = _name()

    async def scenario(redis: Client) -> bool:
        store = KeyStore(redis)
        await store.create_team(team)
        key, secret = await store.create_key(team)
        await redis.set(redis_keys.retired_key_hashes(key.id), "not a set")
        try:
            # The store's one mapping: Redis's WRONGTYPE reply is the domain error, named by class.
            with pytest.raises(StoreUnavailable) as failed:
                await store.revoke(key.id)
        finally:
            await redis.delete(redis_keys.retired_key_hashes(key.id))
        assert failed.value.reason == "ResponseError"  # WRONGTYPE
        return await authenticates(store, secret)

    assert not run_with_client(redis_server.url, scenario)


def test_an_update_during_any_step_of_a_rotation_lands_on_the_new_secret_or_is_refused(
    redis_server: RedisServer,
) -> None:
    async def scenario(redis: Client) -> list[ErrorCode | None]:
        store = KeyStore(redis)
        await store.create_team(team := _name())
        outcomes: list[ErrorCode | None] = []
        for at in range(8):
            key, _ = await store.create_key(team, limits=LimitSet(rpm=1))

            async def update(key_id: str = key.id) -> None:
                _, code = await outcome(store.update_key(key_id, LimitSet(tpm=9), set()))
                outcomes.append(code)

            _, new = await KeyStore(redis, checkpoint=RunAt(at, update)).rotate(key.id, 60, journal=Journal())
            current = await store.lookup(hash_secret(new))
            assert current is not None
            # Landed: on the secret the key has now. Refused (while the rotation held its old
            # secret on grace and had not moved yet): the admin is told to try again.
            assert current.limits == (LimitSet(rpm=1, tpm=9) if outcomes[-1] is None else LimitSet(rpm=1)), at
        return outcomes

    outcomes = run_with_client(redis_server.url, scenario)
    assert set(outcomes) == {None, ErrorCode.SERVER_BUSY}
