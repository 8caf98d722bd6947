"""Deleting a team: every key revoked, then the team gone, in single-key steps
(gateway/keys/steps.py), so it runs on a Redis Cluster as on one Redis."""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.keys import listing
from gateway.keys.record import Journal, TeamNotFoundError
from gateway.keys.steps import Checkpoint, RecordScripts
from gateway.limits.spec import LimitSet
from gateway.redis import keys as redis_keys
from gateway.redis.client import RedisClient

# Rounds of marking before the deletion goes on: each further one means a rotation moved a key.
_MAX_TRIES = 20


async def delete_team(
    redis: RedisClient,
    scripts: RecordScripts,
    name: str,
    *,
    journal: Journal | None,
    forget: Callable[[str], None] | None = None,
    keep_s: int,
    step: Checkpoint,
) -> list[str]:
    """Revokes every key of the team (and every secret a rotation left alive), then removes the
    team; returns the revoked key ids. Every replica drops the secrets at once (the channel);
    `forget` drops them from this replica's cache before the reply, not a moment after it.
    The revoked records stay `keep_s`, so a late request hears "revoked", not "invalid"; usage
    rows stay for reports (`usage --team NAME`).

    Its steps: the keys' records marked revoked (each with its invalidation), the pointers given
    a TTL, the team's record deleted, those keys taken from its key set and last-use hash, its
    name unlisted, the journal entry. Stopped half-way, the team is still there with some keys
    revoked, or gone with its name still listed (listings skip it): the admin, answered 503,
    deletes again. A key made while this runs may not be seen here but is dead all the same: it
    names the team's id, which no team has once the record is gone (gateway.keys.auth), and its
    creation hands out no secret once it sees the team gone (store.create_key). A key rotated
    meanwhile is seen (the pointers read again) or sees this (rotation.py's last check)."""
    record = redis_keys.team(name)
    members = redis_keys.team_keys(name)
    raw = await redis.hmget(record, ["name", "limits"])
    if not raw[0]:
        # Perhaps a deletion that stopped after the record went: finish unlisting its name.
        await _unlist(redis, name)
        raise TeamNotFoundError(name)
    limits = LimitSet.from_json(raw[1])
    ids = sorted(redis_keys.as_text(m) for m in await redis.smembers(members))
    async with redis.pipeline(transaction=False) as pipe:
        for key_id in ids:
            pipe.get(redis_keys.key_hash_by_id(key_id))
            pipe.smembers(redis_keys.retired_key_hashes(key_id))
        found = await pipe.execute()
    hashes: list[str] = []
    for current, retired in zip(found[::2], found[1::2], strict=True):
        hashes += [redis_keys.as_text(h) for h in ([current] if current else []) + sorted(retired)]
    now = repr(time.time())
    done: list[str] = []
    for _ in range(_MAX_TRIES):
        for secret_hash in hashes:
            await step("team_delete.revoke")
            # Only records that still exist (record_mark.lua): one made here would have no id.
            await scripts.mark(
                redis_keys.key_by_hash(secret_hash), "revoked_at", now, ttl_s=keep_s, publish=secret_hash
            )
            done.append(secret_hash)
        # A rotation that moved a key to a new secret since the read above: that one too (a
        # rotation that moves later finds its old secret marked, and revokes its new one).
        pointers = await listing.each(redis, [("get", redis_keys.key_hash_by_id(i)) for i in ids])
        hashes = [h for h in (redis_keys.as_text(p) for p in pointers if p) if h not in done]
        if not hashes:
            break
    if forget is not None:
        for secret_hash in done:
            forget(secret_hash)
    await step("team_delete.expire")
    async with redis.pipeline(transaction=False) as pipe:
        for key_id in ids:
            pipe.expire(redis_keys.key_hash_by_id(key_id), keep_s)
            pipe.expire(redis_keys.retired_key_hashes(key_id), keep_s)
        await pipe.execute()
    await step("team_delete.record")
    await redis.delete(record)
    await step("team_delete.members")
    if ids:
        # Only the ids read above, not the whole set: a team made again under the name once the
        # record went may already have keys here (and their last use), which must stay listed.
        await redis.srem(members, *ids)
        await redis.hdel(redis_keys.key_last_used(name), *ids)
    await step("team_delete.unlist")
    await _unlist(redis, name)
    await step("team_delete.publish")
    await redis.publish(redis_keys.KEY_INVALIDATIONS, f"team:{name}")
    if forget is not None:
        forget(f"team:{name}")
    if journal is not None:
        await step("team_delete.journal")
        await journal.write(
            "team.deleted",
            team=name,
            before={**limits.as_dict(), "keys": ids},
            after={"revoked_keys": ids},
        )
    return ids


async def _unlist(redis: RedisClient, name: str) -> None:
    """Removes the name from `sg:teams`, unless a team of this name was created since its record
    went: it is listed back (create_team lists it before and after making its record, so one
    of the two sides sees the other)."""
    await redis.srem(redis_keys.TEAMS, name)
    if await redis.exists(redis_keys.team(name)):
        await redis.sadd(redis_keys.TEAMS, name)
