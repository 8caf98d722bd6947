"""Deleting a team: every key revoked, and the team gone, in one transaction."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import cast

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from gateway.keys.record import Journal, TeamNotFoundError
from gateway.limits.spec import LimitSet
from gateway.redis import keys as redis_keys


async def delete_team(
    redis: Redis,
    name: str,
    *,
    journal: Journal | None,
    forget: Callable[[str], None] | None = None,
    keep_s: int,
) -> list[str]:
    """Revokes every key of the team (and every secret a rotation left alive), then removes the
    team; returns the revoked key ids. Every replica drops the secrets at once (the channel);
    `forget` drops them from this replica's cache before the reply, not a moment after it.
    The revoked records stay `keep_s`, so a late request hears "revoked", not "invalid"; usage
    rows stay for reports (`usage --team NAME`)."""
    record = redis_keys.team(name)
    members = redis_keys.team_keys(name)

    async def delete(pipe: Pipeline) -> tuple[list[str], list[str]]:
        # WATCHed: the team record (create_key writes under WATCH of it, so a key made meanwhile
        # makes one side retry), its key set, and each key's pointer and retired secrets (a
        # rotation meanwhile would leave a new secret alive).
        await pipe.watch(members)
        if not await pipe.exists(record):
            raise TeamNotFoundError(name)
        ids = sorted(redis_keys.as_text(m) for m in await pipe.smembers(members))
        hashes: list[str] = []
        for key_id in ids:
            await pipe.watch(redis_keys.key_hash_by_id(key_id), redis_keys.retired_key_hashes(key_id))
            current = await pipe.get(redis_keys.key_hash_by_id(key_id))
            if current:
                hashes.append(redis_keys.as_text(current))
            for retired in await pipe.smembers(redis_keys.retired_key_hashes(key_id)):
                # Only records that still exist: HSETNX on a gone one would make a record
                # with no id, which a late request with that secret could not read.
                if await pipe.exists(redis_keys.key_by_hash(redis_keys.as_text(retired))):
                    hashes.append(redis_keys.as_text(retired))
        limits = LimitSet.from_json(await pipe.hget(record, "limits"))
        now = repr(time.time())
        pipe.multi()  # type: ignore[no-untyped-call]  # untyped in redis-py
        for secret_hash in hashes:
            stored = redis_keys.key_by_hash(secret_hash)
            # HSETNX keeps a first revocation's time.
            pipe.hsetnx(stored, "revoked_at", now)
            pipe.expire(stored, keep_s)
            pipe.publish(redis_keys.KEY_INVALIDATIONS, secret_hash)
        for key_id in ids:
            pipe.expire(redis_keys.key_hash_by_id(key_id), keep_s)
            pipe.expire(redis_keys.retired_key_hashes(key_id), keep_s)
        pipe.srem(redis_keys.TEAMS, name)
        pipe.delete(record, members, redis_keys.key_last_used(name))
        pipe.publish(redis_keys.KEY_INVALIDATIONS, f"team:{name}")
        if journal is not None:
            journal.write(
                pipe,
                "team.deleted",
                team=name,
                before={**limits.as_dict(), "keys": ids},
                after={"revoked_keys": ids},
            )
        return ids, hashes

    ids, hashes = cast(
        tuple[list[str], list[str]],
        await redis.transaction(delete, record, value_from_callable=True),
    )
    if forget is not None:
        for secret_hash in hashes:
            forget(secret_hash)
        forget(f"team:{name}")
    return ids
