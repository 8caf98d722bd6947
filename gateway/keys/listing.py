"""The key store's reads of many teams or keys at once (admin listings): each a pipeline of
one-key reads, not a transaction, so on a Redis Cluster redis-py splits it per node and sends each
part at once. Nothing scans the keyspace."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from gateway.keys.record import KeyRecord
from gateway.redis import keys as redis_keys
from gateway.redis.client import RedisClient


async def records(redis: RedisClient, ids: list[str]) -> list[KeyRecord]:
    """The current records of these key ids, by creation time, with when each was last used; an
    id with no record (a creation that stopped half-way, once its record expired) is left out."""
    if not ids:
        return []
    hashes = await each(redis, [("get", redis_keys.key_hash_by_id(i)) for i in ids])
    raws = await each(
        redis, [("hgetall", redis_keys.key_by_hash(redis_keys.as_text(h))) for h in hashes if h]
    )
    found = await _of_current_teams(redis, [KeyRecord.from_hash(raw) for raw in raws if raw])
    return sorted(await with_last_use(redis, found), key=lambda r: r.created_at)


async def _of_current_teams(redis: RedisClient, records: list[KeyRecord]) -> list[KeyRecord]:
    """Leaves out the keys of an earlier team of the same name: a deletion that stopped
    before removing the team's key set leaves it to a team later made under the name."""
    teams = sorted({r.team for r in records})
    ids = await each(redis, [("hget", redis_keys.team(team), "id") for team in teams])
    current = {team: redis_keys.as_text(i) for team, i in zip(teams, ids, strict=True) if i}
    return [r for r in records if r.team_id is None or current.get(r.team, r.team_id) == r.team_id]


async def with_last_use(redis: RedisClient, records: list[KeyRecord]) -> list[KeyRecord]:
    """The records with `last_used_at` filled in: one more round trip, for all their teams."""
    if not records:
        return records
    teams = sorted({r.team for r in records})
    raws = await each(redis, [("hgetall", redis_keys.key_last_used(team)) for team in teams])
    used = {
        (team, redis_keys.as_text(k)): float(v)
        for team, raw in zip(teams, raws, strict=True)
        for k, v in raw.items()
    }
    return [replace(r, last_used_at=used.get((r.team, r.id))) for r in records]


async def each(redis: RedisClient, calls: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Reads of many keys in one pipeline, not a transaction: on a cluster redis-py splits it
    per node and sends each part at once (a read of many teams fans out over the nodes)."""
    if not calls:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for name, *args in calls:
            getattr(pipe, name)(*args)
        return list(await pipe.execute())
