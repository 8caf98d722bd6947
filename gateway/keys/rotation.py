"""A key's secrets: rotating to a new one, revoking every one, finding the current one.

sg:keyid:<id> points to the hash of the key's current secret and sg:keyid:<id>:retired holds the
hashes a rotation replaced; each secret's record is sg:key:<hash>. They are three Redis keys in
three hash slots, so each write here is a sequence of one-key steps (gateway/keys/steps.py),
ordered so that stopping after any of them leaves no secret alive that a revocation would miss.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from gateway.errors import ErrorCode, GatewayError
from gateway.keys import listing
from gateway.keys.record import (
    KEY_ID_RE,
    KEY_PREFIX,
    Journal,
    KeyNotFoundError,
    KeyRecord,
    TeamInfo,
    hash_secret,
)
from gateway.keys.steps import Checkpoint, RecordScripts
from gateway.redis import keys as redis_keys
from gateway.redis.client import RedisClient

# Rotations and revocations that find the key's pointer moved by another one go again, this often.
_MAX_TRIES = 20
# Written on the old secret's record by a rotation's grace step: when the rotation began (an
# update of the key waits for it to finish, store.update_key), and the key's own expiry, since
# `expires_at` becomes the grace's end: a rotation stopped after that step and done again gives
# the new secret the key's expiry, not the grace's.
RETIRED_AT = "retired_at"
_KEY_EXPIRES_AT = "key_expires_at"


def new_secret() -> tuple[str, str]:
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    return secret, hash_secret(secret)


async def pointer(redis: RedisClient, key_id: str) -> str | None:
    """The hash of the key's current secret, None when there is no such key."""
    found = await redis.get(redis_keys.key_hash_by_id(key_id))
    return redis_keys.as_text(found) if found else None


async def current_raw(redis: RedisClient, key_id: str) -> tuple[str, Mapping[Any, Any]]:
    """The current secret's hash and its stored record; KeyNotFoundError if none."""
    if not KEY_ID_RE.fullmatch(key_id):
        raise KeyNotFoundError(key_id)
    secret_hash = await pointer(redis, key_id)
    raw = await redis.hgetall(redis_keys.key_by_hash(secret_hash)) if secret_hash else None
    if not secret_hash or not raw:
        raise KeyNotFoundError(key_id)
    return secret_hash, raw


async def rotate(
    redis: RedisClient,
    scripts: RecordScripts,
    key_id: str,
    grace_s: float,
    *,
    journal: Journal | None,
    slack_s: int,
    unfinished_s: int,
    step: Checkpoint,
    team_info: Callable[[str], Awaitable[TeamInfo | None]],
) -> tuple[KeyRecord, str]:
    """A new secret for the key; the old one keeps working for `grace_s`, then stops. Its steps:
    1. the new secret's record, a copy, with a TTL (nobody holds the secret yet);
    2. the old secret listed as retired (so revoking the key finds it, whatever comes next);
    3. the old secret's grace: it expires, only if its record is still the one copied (an
       update meanwhile: the rotation goes again from it; a revocation: the rotation stops,
       and the new record is marked revoked too); from here an update of the key waits;
    4. the journal entry; 5. the new record kept (PERSIST);
    6. the pointer moved to the new secret, only from the old one (of two rotations at once,
       the second goes again from the first's secret);
    7. a revocation that read the pointer before step 6 revoked the old secret only: if it
       did, the new one is revoked too, and the rotation answers as for a revoked key.
    Stopped before 6, the key is as it was, but for an old secret on its grace (fail closed:
    rotate again, which gives the new secret the key's own expiry; updates wait until then);
    the new secret was never returned."""
    retired = redis_keys.retired_key_hashes(key_id)
    for _ in range(_MAX_TRIES):
        old_hash, raw = await current_raw(redis, key_id)
        current = KeyRecord.from_hash(raw)
        if current.revoked:
            raise KeyNotFoundError(key_id)
        record = replace(current, expires_at=_own_expiry(current, raw))
        if record.team_id is None:
            # A key made before records named their team's id: its new secret names it, so a
            # deletion of the team that read the old secret before this moved the pointer (and so
            # never marks the new one) leaves it dead under a team made again with the name.
            info = await team_info(record.team)
            record = replace(record, team_id=info.id if info is not None else None)
        secret, secret_hash = new_secret()
        grace_ends = time.time() + grace_s
        old_ends = grace_ends if current.expires_at is None else min(grace_ends, current.expires_at)
        old_key, new_key = redis_keys.key_by_hash(old_hash), redis_keys.key_by_hash(secret_hash)
        keep_s = math.ceil(grace_s) + slack_s
        await step("rotate.create")
        await scripts.create(new_key, record.fields(), ttl_s=unfinished_s)
        await step("rotate.retire")
        await redis.sadd(retired, old_hash)
        await step("rotate.grace")
        # Only from the record copied: an update of the key that landed since makes this go
        # again from it (and one that comes later waits for the pointer to move).
        read = {f: raw.get(f.encode(), b"") for f in ("revoked_at", "limits", "models", "expires_at")}
        graced = await scripts.swap(
            old_key,
            read,
            {
                "expires_at": repr(old_ends),
                RETIRED_AT: repr(time.time()),
                _KEY_EXPIRES_AT: repr(record.expires_at) if record.expires_at is not None else "",
            },
            ttl_s=keep_s,
            publish=old_hash,
        )
        if graced != 1:
            if graced < 0 or await redis.hget(old_key, "revoked_at") is not None:
                raise await _revoked_meanwhile(scripts, key_id, secret_hash)
            await redis.delete(new_key)
            continue
        if journal is not None:
            await step("rotate.journal")
            await journal.write(
                "key.rotated",
                team=record.team,
                key_id=key_id,
                before={"previous_secret_expires_at": current.expires_at},
                after={"previous_secret_expires_at": old_ends, "grace_seconds": grace_s},
            )
        await step("rotate.keep")
        await redis.persist(new_key)
        await step("rotate.point")
        if not await scripts.move_pointer(redis_keys.key_hash_by_id(key_id), old_hash, secret_hash):
            # Another rotation moved it first; this one's record is of no use to anyone.
            await redis.delete(new_key)
            continue
        await step("rotate.check")
        if (await redis.hget(old_key, "revoked_at")) is not None:
            raise await _revoked_meanwhile(scripts, key_id, secret_hash)
        await step("rotate.expire_retired")
        await _keep_retired(redis, retired, keep_s)
        return record, secret
    # Every try lost to another change of the key: it is there, so not a 404.
    raise GatewayError(ErrorCode.SERVER_BUSY, "The key is busy with other changes; try again.")


async def _keep_retired(redis: RedisClient, retired: str, keep_s: int) -> None:
    """The retired set lives as long as its longest-lived record: a revocation finds a key's
    old secrets only here, so a rotation with a short grace must not cut short the set that
    lists an earlier one's old secret on a long grace. A secret whose record has gone (its
    grace and slack over) leaves the set: it can never come back, and a key rotated daily would
    otherwise list every secret it ever had, for each revocation to mark."""
    hashes = sorted(redis_keys.as_text(h) for h in await redis.smembers(retired))
    ttls = await listing.each(redis, [("ttl", redis_keys.key_by_hash(h)) for h in hashes])
    gone = [h for h, ttl in zip(hashes, ttls, strict=True) if ttl == -2]
    if gone:
        await redis.srem(retired, *gone)
    if -1 in ttls:
        await redis.persist(retired)  # a record kept for good: its secret too stays revocable
    else:
        await redis.expire(retired, max([keep_s, *ttls]))


def _own_expiry(current: KeyRecord, raw: Mapping[Any, Any]) -> float | None:
    """The key's own expiry: its record's, unless a rotation stopped after its grace step."""
    if not raw.get(RETIRED_AT.encode()):
        return current.expires_at
    own = raw.get(_KEY_EXPIRES_AT.encode())
    return float(own) if own else None


async def _revoked_meanwhile(scripts: RecordScripts, key_id: str, secret_hash: str) -> KeyNotFoundError:
    await scripts.mark(
        redis_keys.key_by_hash(secret_hash), "revoked_at", repr(time.time()), publish=secret_hash
    )
    return KeyNotFoundError(key_id)


async def revoke(
    redis: RedisClient,
    scripts: RecordScripts,
    key_id: str,
    *,
    journal: Journal | None,
    step: Checkpoint,
) -> tuple[KeyRecord, list[str]]:
    """Marks the key's current secret, then every secret a rotation left alive, revoked (each in
    one step with its invalidation), then writes the journal entry. Marking first means a
    revocation stopped half-way has already refused what it marked; the admin, answered 503,
    revokes again (it changes nothing already revoked). A rotation that moves the key to a new
    secret meanwhile is seen (the pointer read again) or sees this (rotate's last check)."""
    current_hash, raw = await current_raw(redis, key_id)
    current = KeyRecord.from_hash(raw)
    now = repr(time.time())
    done: list[str] = []
    # The current secret first, before anything else is read.
    pending = [current_hash]
    for _ in range(_MAX_TRIES):
        for secret_hash in pending:
            await step("revoke.mark")
            # A retired record that is gone (its grace and slack over) is left gone.
            await scripts.mark(redis_keys.key_by_hash(secret_hash), "revoked_at", now, publish=secret_hash)
            done.append(secret_hash)
        retired = await redis.smembers(redis_keys.retired_key_hashes(key_id))
        pending = [h for h in sorted(redis_keys.as_text(h) for h in retired) if h not in done]
        moved = await pointer(redis, key_id)
        if moved is not None and moved not in done:
            pending.insert(0, moved)
        if not pending:
            break
    if journal is not None:
        await step("revoke.journal")
        # A first revocation's time is kept: revoking again changes nothing.
        after = {"revoked_at": current.revoked_at if current.revoked_at is not None else float(now)}
        await journal.write(
            "key.revoked",
            team=current.team,
            key_id=key_id,
            before={"revoked_at": current.revoked_at},
            after=after,
        )
    _, raw = await current_raw(redis, key_id)
    return KeyRecord.from_hash(raw), done
