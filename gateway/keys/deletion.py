"""Deleting a team: every key revoked, then the team gone, in single-key steps
(gateway/keys/steps.py), so it runs on a Redis Cluster as on one Redis.

A team may hold thousands of keys, and an admin call is cut off after a few seconds
(gateway/admin/routes.py): every per-key read and write goes in pipelines of at most `BATCH`
keys or secrets, not a transaction (a cluster client splits each per node and sends the parts at
once), so a deletion costs a few round trips per `BATCH` keys, not one per key. And a deletion
stopped half-way (cut off, a failed call) is not started over: the retry reads which secrets are
already revoked and marks only the others, so each attempt gets further than the last.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from gateway.keys import listing
from gateway.keys.record import Journal, TeamNotFoundError
from gateway.keys.steps import Checkpoint, RecordScripts
from gateway.limits.spec import LimitSet
from gateway.redis import keys as redis_keys
from gateway.redis.client import RedisClient

T = TypeVar("T")

# Keys (or secrets) per pipeline, at most two commands each: each pipeline is one round trip (on a
# cluster, one per node, in parallel). Large enough that a team of thousands of keys takes a few
# dozen round trips; small enough that no one request or reply grows with the team.
BATCH = 500
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

    Its steps (each a pipeline of up to BATCH one-key commands, so a step may repeat): the keys'
    records marked revoked (each with its invalidation; a record already revoked with a TTL, by a
    deletion that stopped, is left as it is), the pointers given a TTL, the team's record
    deleted, those keys taken from its key set and last-use hash, its name unlisted, the journal
    entry. Stopped half-way, the team is still there with some keys revoked, or gone with its
    name still listed (listings skip it): the admin, answered 503, deletes again, which goes on
    from the first secret not yet revoked. A key made while this runs may not be seen here but is
    dead all the same: it names the team's id, which no team has once the record is gone
    (gateway.keys.auth), and its creation hands out no secret once it sees the team gone
    (store.create_key). A key rotated meanwhile is seen (the pointers read again) or sees this
    (rotation.py's last check)."""
    record = redis_keys.team(name)
    members = redis_keys.team_keys(name)
    raw = await redis.hmget(record, ["name", "limits"])
    if not raw[0]:
        # Perhaps a deletion that stopped after the record went: finish unlisting its name.
        await _unlist(redis, name)
        raise TeamNotFoundError(name)
    limits = LimitSet.from_json(raw[1])
    ids = sorted(redis_keys.as_text(m) for m in await redis.smembers(members))
    hashes = await _secrets(redis, ids)
    seen = set(hashes)
    pending = await _not_revoked(redis, hashes)
    now = repr(time.time())
    for _ in range(_MAX_TRIES):
        for chunk in _chunks(pending):
            await step("team_delete.revoke")
            # Only records that still exist (record_mark.lua): one made here would have no id.
            await scripts.mark_all(
                [redis_keys.key_by_hash(h) for h in chunk], "revoked_at", now, ttl_s=keep_s, publish=chunk
            )
        # A rotation that moved a key to a new secret since the read above: that one too (a
        # rotation that moves later finds its old secret marked, and revokes its new one).
        pointers = await _each(redis, [("get", redis_keys.key_hash_by_id(i)) for i in ids])
        pending = sorted({redis_keys.as_text(p) for p in pointers if p} - seen)
        seen.update(pending)
        if not pending:
            break
    if forget is not None:
        for secret_hash in sorted(seen):
            forget(secret_hash)
    for chunk in _chunks(ids):
        await step("team_delete.expire")
        await _each(
            redis,
            [
                (command, key, keep_s)
                for key_id in chunk
                for command, key in (
                    ("expire", redis_keys.key_hash_by_id(key_id)),
                    ("expire", redis_keys.retired_key_hashes(key_id)),
                )
            ],
        )
    await step("team_delete.record")
    await redis.delete(record)
    # Only the ids read above, not the whole set: a team made again under the name once the
    # record went may already have keys here (and their last use), which must stay listed.
    for chunk in _chunks(ids):
        await step("team_delete.members")
        await _each(redis, [("srem", members, *chunk), ("hdel", redis_keys.key_last_used(name), *chunk)])
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


async def _secrets(redis: RedisClient, ids: list[str]) -> list[str]:
    """The hashes of every secret of these keys: each one's current secret, then those a rotation
    retired (still alive until their grace ends)."""
    found = await _each(
        redis,
        [
            call
            for key_id in ids
            for call in (
                ("get", redis_keys.key_hash_by_id(key_id)),
                ("smembers", redis_keys.retired_key_hashes(key_id)),
            )
        ],
    )
    hashes: list[str] = []
    for current, retired in zip(found[::2], found[1::2], strict=True):
        hashes += [redis_keys.as_text(h) for h in ([current] if current else []) + sorted(retired)]
    return hashes


async def _not_revoked(redis: RedisClient, hashes: list[str]) -> list[str]:
    """The secrets still to mark: all but those whose record is gone, or revoked already with a
    TTL (by this deletion before it stopped). A key revoked on its own keeps its record for good
    (rotation.revoke gives it no TTL), so it is marked again here for the TTL."""
    found = await _each(
        redis,
        [
            call
            for h in hashes
            for call in (
                ("hexists", redis_keys.key_by_hash(h), "revoked_at"),
                ("ttl", redis_keys.key_by_hash(h)),
            )
        ],
    )
    return [
        h
        for h, revoked, ttl in zip(hashes, found[::2], found[1::2], strict=True)
        if ttl != -2 and not (revoked and ttl >= 0)
    ]


async def _each(redis: RedisClient, calls: Sequence[tuple[Any, ...]]) -> list[Any]:
    """listing.each, in pipelines of at most 2 x BATCH commands (BATCH keys' two reads)."""
    results: list[Any] = []
    for chunk in _chunks(calls, 2 * BATCH):
        results += await listing.each(redis, chunk)
    return results


def _chunks(items: Sequence[T], size: int = BATCH) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


async def _unlist(redis: RedisClient, name: str) -> None:
    """Removes the name from `sg:teams`, unless a team of this name was created since its record
    went: it is listed back (create_team lists it before and after making its record, so one
    of the two sides sees the other)."""
    await redis.srem(redis_keys.TEAMS, name)
    if await redis.exists(redis_keys.team(name)):
        await redis.sadd(redis_keys.TEAMS, name)
