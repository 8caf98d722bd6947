"""A team with thousands of keys, on one Redis and on a Redis Cluster: deleting it, listing its
keys and the usage report across many teams cost round trips bounded by the keys over the batch
size (gateway/keys/deletion.py, BATCH) plus a constant, never one per key; and a deletion cut
off half-way (an admin call past its time) is not started over: each retry gets further.

Round trips are counted by a seam in the gateway's own client (`connect_redis`): its connection
class, extended to count each write of commands to a socket (one per round trip: a pipeline is
one write per node it reaches) and the commands by name; the connection handshake is not
counted. No timing is asserted.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.typing import EncodableT
from starlette.datastructures import Headers

from gateway.config import Settings
from gateway.errors import ErrorCode, GatewayError
from gateway.keys import deletion
from gateway.keys.auth import Authenticator
from gateway.keys.record import KeyRecord
from gateway.keys.rotation import new_secret
from gateway.keys.store import KeyStore
from gateway.limits.spec import NO_LIMITS
from gateway.metering.meter import Meter
from gateway.metering.record import UsageRecord
from gateway.metering.usage_store import UsageStore
from gateway.observability.metrics import Metrics
from gateway.redis import keys as redis_keys
from gateway.redis.client import RedisClient, close_redis, connect_redis
from gateway.redis.scripts import load_script
from tests.redis_cluster import RedisServer

pytestmark = pytest.mark.also_on_cluster

T = TypeVar("T")
KEYS = 3000
# Every tenth key was rotated: its old secret is still on its grace (one more secret to revoke).
ROTATED_EVERY = 10
# Every hundredth was revoked on its own, which leaves its record with no TTL.
REVOKED_EVERY = 100


class Traffic:
    """What the client sent: round trips (socket writes of commands) and commands by name."""

    def __init__(self) -> None:
        self.round_trips = 0
        self.commands: Counter[str] = Counter()

    def reset(self) -> None:
        self.round_trips = 0
        self.commands.clear()


def _counting(base: type[Any], traffic: Traffic) -> type[Any]:
    class Counting(base):  # type: ignore[misc]
        _handshake = False

        async def on_connect_check_health(self, check_health: bool = True) -> None:
            self._handshake = True
            try:
                await super().on_connect_check_health(check_health)
            finally:
                self._handshake = False

        def pack_command(self, *args: Any) -> Any:
            if not self._handshake:
                name = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
                traffic.commands[name.upper()] += 1
            return super().pack_command(*args)

        async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            if not self._handshake:
                traffic.round_trips += 1
            await super().send_packed_command(command, check_health)

    return Counting


def _counted_client(url: str, traffic: Traffic) -> RedisClient:
    """The gateway's own client, its connections counting what they send."""
    redis = connect_redis(Settings(redis_url=url))
    if isinstance(redis, RedisCluster):
        kwargs: dict[str, Any] = redis.nodes_manager.connection_kwargs
        kwargs["connection_class"] = _counting(kwargs["connection_class"], traffic)
        for node in redis.nodes_manager.startup_nodes.values():
            node.connection_class = kwargs["connection_class"]
    else:
        pool = redis.connection_pool
        pool.connection_class = _counting(pool.connection_class, traffic)
    return redis


def _run(url: str, scenario: Callable[[RedisClient, Traffic, int], Awaitable[T]]) -> T:
    """Runs `scenario` with a counting client, warmed up (slot map read, the mark script loaded
    on every primary) and its counts reset, and the number of primaries: on a cluster each
    pipeline is up to one round trip per primary, sent at once."""

    async def main() -> T:
        traffic = Traffic()
        redis = _counted_client(url, traffic)
        try:
            await redis.ping()
            await redis.script_load(load_script(redis, "record_mark").script)
            nodes = len(redis.get_primaries()) if isinstance(redis, RedisCluster) else 1
            traffic.reset()
            return await scenario(redis, traffic, nodes)
        finally:
            await close_redis(redis)

    return asyncio.run(main())


class Stop(Exception):
    """Raised by a checkpoint: the write stops before the step it was about to run."""


class RevokeBudget:
    """Lets a deletion run `batches` revoke steps, then stops it: as an admin call cut off at
    its time after the same amount of work each try."""

    def __init__(self, batches: int) -> None:
        self.batches = batches
        self.calls = 0

    async def __call__(self, step: str) -> None:
        if step == "team_delete.revoke":
            if self.calls == self.batches:
                raise Stop(step)
            self.calls += 1


async def _team_with_keys(redis: RedisClient, store: KeyStore, count: int) -> tuple[str, list[str], int]:
    """A team of `count` keys, written as the store writes them but in pipelines (making each
    with create_key would take ten round trips a key). Returns its name, its keys' current
    secrets and how many secrets it has in all (the retired ones too)."""
    team = "scale" + secrets.token_hex(4)
    await store.create_team(team)
    info = await store.team_info(team)
    assert info is not None
    held: list[str] = []
    secrets_in_all = 0
    for start in range(0, count, 500):
        async with redis.pipeline(transaction=False) as pipe:
            for n in range(start, min(start + 500, count)):
                record = KeyRecord(
                    id="key_" + secrets.token_hex(8),
                    team=team,
                    name=f"k{n}",
                    models=None,
                    limits=NO_LIMITS,
                    created_at=time.time(),
                    revoked_at=None,
                    team_id=info.id,
                )
                secret, secret_hash = new_secret()
                fields: dict[EncodableT, EncodableT] = {k: v for k, v in record.fields().items()}
                if n % REVOKED_EVERY == 1:
                    fields["revoked_at"] = repr(time.time())
                pipe.hset(redis_keys.key_by_hash(secret_hash), mapping=fields)
                pipe.set(redis_keys.key_hash_by_id(record.id), secret_hash)
                pipe.sadd(redis_keys.team_keys(team), record.id)
                secrets_in_all += 1
                if n % ROTATED_EVERY == 0:
                    _, old_hash = new_secret()
                    old = {**fields, "expires_at": repr(time.time() + 3600)}
                    pipe.hset(redis_keys.key_by_hash(old_hash), mapping=old)
                    pipe.expire(redis_keys.key_by_hash(old_hash), 7200)
                    pipe.sadd(redis_keys.retired_key_hashes(record.id), old_hash)
                    secrets_in_all += 1
                held.append(secret)
            await pipe.execute()
    return team, held, secrets_in_all


async def _all_revoked_and_expiring(redis: RedisClient, team: str, ids: list[str]) -> bool:
    """Whether every secret of these keys is revoked, and its record and pointer go in time."""
    pointers = await _read(redis, [("get", redis_keys.key_hash_by_id(i)) for i in ids])
    retired = await _read(redis, [("smembers", redis_keys.retired_key_hashes(i)) for i in ids])
    hashes = [p.decode() for p in pointers] + [h.decode() for members in retired for h in members]
    assert len(hashes) == len(ids) + math.ceil(len(ids) / ROTATED_EVERY)
    marks = await _read(redis, [("hget", redis_keys.key_by_hash(h), "revoked_at") for h in hashes])
    ttls = await _read(redis, [("ttl", redis_keys.key_by_hash(h)) for h in hashes])
    pointer_ttls = await _read(redis, [("ttl", redis_keys.key_hash_by_id(i)) for i in ids])
    return all(marks) and all(t > 0 for t in ttls + pointer_ttls)


async def _read(redis: RedisClient, calls: list[tuple[Any, ...]]) -> list[Any]:
    async with redis.pipeline(transaction=False) as pipe:
        for name, *args in calls:
            getattr(pipe, name)(*args)
        return list(await pipe.execute())


async def _authenticates(store: KeyStore, secret: str) -> bool:
    auth = Authenticator(store, cache_ttl_s=0.0, timeout_s=5.0)
    code = None
    try:
        await auth.authenticate(Headers({"authorization": f"Bearer {secret}"}))
    except GatewayError as exc:
        code = exc.code
    assert code in (None, ErrorCode.INVALID_API_KEY)
    return code is None


def _batches(items: int) -> int:
    return math.ceil(items / deletion.BATCH)


def test_a_team_of_thousands_of_keys_is_deleted_in_round_trips_per_batch_not_per_key(
    redis_server: RedisServer,
) -> None:
    async def scenario(redis: RedisClient, traffic: Traffic, nodes: int) -> None:
        store = KeyStore(redis)
        team, held, in_all = await _team_with_keys(redis, store, KEYS)
        assert await _authenticates(store, held[0])
        ids = sorted(k.id for k in await store.list_keys(team))
        traffic.reset()

        assert sorted(await store.delete_team(team, journal=None)) == ids  # one admin call

        # Per pipeline of BATCH: the keys' pointers and retired sets; whether each secret is
        # revoked; the marks; the pointers again; their TTLs; the key set and last-use hash.
        # Plus a constant: the team's record and key set, its deletion, unlisting, publishing.
        # A pipeline is one round trip per primary it reaches (sent at once on a cluster).
        bound = nodes * (6 * _batches(in_all) + 10)
        assert traffic.round_trips <= bound, (traffic.round_trips, bound)
        assert traffic.round_trips < in_all / 10  # one per key would be thousands
        # Each secret marked once (a key revoked on its own too: its record gets a TTL).
        assert traffic.commands["EVALSHA"] == in_all
        print(
            f"\n{nodes} primaries: {KEYS} keys, {in_all} secrets: {traffic.round_trips} round trips, ", end=""
        )
        print(f"{sum(traffic.commands.values())} commands ({dict(traffic.commands)})")

        assert await _all_revoked_and_expiring(redis, team, ids)
        for secret in held[:: KEYS // 20]:
            assert not await _authenticates(store, secret)
        assert team not in await store.list_teams()

    _run(redis_server.url, scenario)


def test_a_deletion_cut_off_each_try_after_the_same_work_finishes_in_a_few_tries(
    redis_server: RedisServer,
) -> None:
    """Each try may mark one batch of secrets before it is stopped: the tries go on from where
    the last one stopped (not from the first key), and every secret is marked once in all."""

    async def scenario(redis: RedisClient, traffic: Traffic, nodes: int) -> None:
        store = KeyStore(redis)
        team, held, in_all = await _team_with_keys(redis, store, 1500)
        ids = sorted(k.id for k in await store.list_keys(team))
        # A Redis that lost the scripts (a restart, a failover): the first batch loads it again.
        await redis.script_flush()
        traffic.reset()
        tries = 0
        while True:
            tries += 1
            assert tries <= _batches(in_all), "a retry that starts over never finishes"
            try:
                await KeyStore(redis, checkpoint=RevokeBudget(1)).delete_team(team, journal=None)
                break
            except Stop:
                assert await store.team_exists(team)
        assert tries == _batches(in_all)
        # Each secret marked once, but for the first batch, sent again after NOSCRIPT; keys
        # revoked on their own are marked (for a TTL), already-marked ones are not.
        assert traffic.commands["EVALSHA"] == in_all + min(in_all, deletion.BATCH)
        assert await _all_revoked_and_expiring(redis, team, ids)
        assert not any([await _authenticates(store, s) for s in held[:: len(held) // 10]])
        assert not await store.team_exists(team)

    _run(redis_server.url, scenario)


def test_listing_a_team_of_thousands_of_keys_takes_a_constant_number_of_round_trips(
    redis_server: RedisServer,
) -> None:
    async def scenario(redis: RedisClient, traffic: Traffic, nodes: int) -> None:
        store = KeyStore(redis)
        team, _, _ = await _team_with_keys(redis, store, KEYS)
        traffic.reset()
        listed = await store.list_keys(team)
        assert len(listed) == KEYS
        # The key set; the pointers; the records; the teams' ids; the last uses.
        assert traffic.round_trips <= nodes * 5, traffic.round_trips
        listed_trips = traffic.round_trips
        traffic.reset()
        every = await store.list_all_keys()
        assert {k.id for k in listed} <= {k.id for k in every}
        # And the teams' names and records, and their key sets, first.
        assert traffic.round_trips <= nodes * 8, traffic.round_trips
        print(f"\n{nodes} primaries: {KEYS} keys listed in {listed_trips} round trips, ", end="")
        print(f"every key of every team in {traffic.round_trips}")
        await store.delete_team(team, journal=None)

    _run(redis_server.url, scenario)


def test_the_usage_report_across_hundreds_of_teams_takes_a_constant_number_of_round_trips(
    redis_server: RedisServer,
) -> None:
    async def scenario(redis: RedisClient, traffic: Traffic, nodes: int) -> None:
        store = KeyStore(redis)
        meter = Meter(UsageStore(redis, timeout_s=5), Metrics())
        teams = ["usage" + secrets.token_hex(4) for _ in range(300)]
        for n, team in enumerate(teams):
            await store.create_team(team)
            for day in ("2026-01-01", "2026-01-02"):
                usage = UsageRecord(
                    request_id=f"r{n}{day}",
                    team=team,
                    key_id=f"key_{n:016x}",
                    model="m",
                    prompt_tokens=n,
                    completion_tokens=1,
                    error=False,
                    disconnected=False,
                    day=day,
                    api="chat",
                )
                assert await meter.record(usage)
        traffic.reset()
        # As the admin API's report without `team`: every team's name, then its usage.
        listed = await store.list_teams()
        rows = await meter.report(listed, None, None)
        assert {r["team"] for r in rows} >= set(teams)
        # The names; the teams' records; their days; the days' rows.
        assert traffic.round_trips <= nodes * 4, traffic.round_trips
        print(f"\n{nodes} primaries: usage of {len(listed)} teams in {traffic.round_trips} round trips")

    _run(redis_server.url, scenario)
