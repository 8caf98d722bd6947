"""Teams and API keys in Redis. A key's secret is shown once, at creation; only its SHA-256 is kept.

sg:teams                 SET   team names
sg:team:<team>           HASH  name, id, created_at, limits (JSON); `id` is minted at creation, so
                               a team deleted and re-created under its name is another team (its
                               cache salt, its stored responses); a team made before ids existed
                               gets one on its first read (`team_info`)
sg:team:<team>:keys      SET   key ids
sg:key:<sha256>          HASH  the key record (id, team, name, models, limits (JSON),
                               created_at, revoked_at, expires_at)
sg:keyid:<id>            STR   sha256 of the key's current secret, to find the record by id
sg:keyid:<id>:retired    SET   hashes of secrets a rotation replaced (alive until their grace ends)
sg:{t:<team>}:last-used  HASH  key id -> when it was last used (written by settle.lua, read here)

Every change to what a secret may do (revoke, rotate, new limits) is published on
`sg:keys:invalidate` (the secret's hash, or `team:<name>` for a team's limits), so every replica
drops its cached copy at once.

Every change also takes a Journal (the admin audit log, gateway/admin/audit.py), whose entry is
queued in the change's own MULTI/EXEC: both land or neither does.
"""

from __future__ import annotations

import enum
import hashlib
import math
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import cast

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from gateway.keys import deletion
from gateway.keys.record import (
    KEY_ID_RE,
    KEY_PREFIX,
    SECRET_RE,
    TEAM_FIELDS,
    TEAM_NAME_RE,
    Journal,
    KeyNotFoundError,
    KeyRecord,
    KeyRevokedError,
    TeamExistsError,
    TeamInfo,
    TeamNotFoundError,
    team_view,
)
from gateway.limits.spec import NO_LIMITS, LimitSet
from gateway.redis import keys as redis_keys

__all__ = [
    "KEEP",
    "KEY_ID_RE",
    "KEY_PREFIX",
    "SECRET_RE",
    "TEAM_NAME_RE",
    "Journal",
    "KeyNotFoundError",
    "KeyRecord",
    "KeyRevokedError",
    "KeyStore",
    "TeamExistsError",
    "TeamInfo",
    "TeamNotFoundError",
    "hash_secret",
]

# A retired secret's record outlives its grace by this much, so late requests still get a clear
# "expired" instead of "invalid".
_RETIRED_RECORD_SLACK_S = 24 * 3600


class _Keep(enum.Enum):
    KEEP = "keep"


# update_key's default for `models` and `expires_at`: leave as they are (None means "every model"
# and "never", so it cannot be the default).
KEEP = _Keep.KEEP


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class KeyStore:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def create_team(
        self, name: str, limits: LimitSet = NO_LIMITS, *, journal: Journal | None = None
    ) -> dict[str, object]:
        created_at = time.time()
        record = redis_keys.team(name)

        async def create(pipe: Pipeline) -> None:
            # The new record is WATCHed: of two creations of one name, the second's EXEC fails and
            # its retry finds the name taken. So the name, the record and the journal entry land
            # in one transaction.
            if await pipe.sismember(redis_keys.TEAMS, name):
                raise TeamExistsError(name)
            pipe.multi()  # type: ignore[no-untyped-call]  # untyped in redis-py
            pipe.sadd(redis_keys.TEAMS, name)
            pipe.hset(
                record,
                mapping={
                    "name": name,
                    "id": new_team_id(),
                    "created_at": repr(created_at),
                    "limits": limits.to_json(),
                },
            )
            if journal is not None:
                journal.write(pipe, "team.created", team=name, before={}, after=limits.as_dict())

        await self._redis.transaction(create, record)
        return {"name": name, "created_at": created_at, "limits": limits.as_dict()}

    async def team_limits(self, name: str) -> LimitSet | None:
        """None when the team does not exist."""
        raw = await self._redis.hmget(redis_keys.team(name), ["name", "limits"])
        return LimitSet.from_json(raw[1]) if raw[0] else None

    async def team_info(self, name: str) -> TeamInfo | None:
        """The team's limits and id; None when the team does not exist. A team made before ids
        existed gets one here, once: of two replicas minting at once, HSETNX keeps the first."""
        record = redis_keys.team(name)
        raw = await self._redis.hmget(record, ["name", "limits", "id"])
        if not raw[0]:
            return None
        if raw[2]:
            return TeamInfo(LimitSet.from_json(raw[1]), redis_keys.as_text(raw[2]))

        async def mint(pipe: Pipeline) -> None:
            # WATCHed, so a team deleted meanwhile is not brought back as a bare hash with an id.
            if not await pipe.exists(record):
                return
            pipe.multi()  # type: ignore[no-untyped-call]  # untyped in redis-py
            pipe.hsetnx(record, "id", new_team_id())

        await self._redis.transaction(mint, record)
        raw = await self._redis.hmget(record, ["name", "limits", "id"])
        if not raw[0] or not raw[2]:
            return None
        return TeamInfo(LimitSet.from_json(raw[1]), redis_keys.as_text(raw[2]))

    async def update_team(
        self, name: str, changes: LimitSet, cleared: set[str], *, journal: Journal | None = None
    ) -> LimitSet:
        record = redis_keys.team(name)

        async def update(pipe: Pipeline) -> LimitSet:
            # Read, merge and write under WATCH: two concurrent updates cannot lose one another,
            # and the journal's old values are the ones this update replaced.
            raw = await pipe.hmget(record, ["name", "limits"])
            if not raw[0]:
                raise TeamNotFoundError(name)
            current = LimitSet.from_json(raw[1])
            limits = current.merged(changes, cleared)
            pipe.multi()  # type: ignore[no-untyped-call]  # untyped in redis-py
            pipe.hset(record, "limits", limits.to_json())
            pipe.publish(redis_keys.KEY_INVALIDATIONS, f"team:{name}")
            if journal is not None:
                journal.write(
                    pipe, "team.updated", team=name, before=current.as_dict(), after=limits.as_dict()
                )
            return limits

        return cast(LimitSet, await self._redis.transaction(update, record, value_from_callable=True))

    async def update_key(
        self,
        key_id: str,
        changes: LimitSet,
        cleared: set[str],
        *,
        models: Sequence[str] | _Keep | None = KEEP,
        expires_at: float | _Keep | None = KEEP,
        journal: Journal | None = None,
    ) -> KeyRecord:
        """New limits, and optionally new models (None: every model) and expiry (None: never). A
        revoked key cannot change: it would read as if it could be used again."""
        if not KEY_ID_RE.fullmatch(key_id):
            raise KeyNotFoundError(key_id)
        pointer = redis_keys.key_hash_by_id(key_id)

        async def update(pipe: Pipeline) -> KeyRecord:
            # As update_team, read-merge-write under WATCH: of the id's pointer too, so a rotation
            # meanwhile (a new secret, a copy of the record) makes this retry on the new record.
            secret_hash_raw = await pipe.get(pointer)
            if not secret_hash_raw:
                raise KeyNotFoundError(key_id)
            secret_hash = redis_keys.as_text(secret_hash_raw)
            stored = redis_keys.key_by_hash(secret_hash)
            await pipe.watch(stored)
            raw = await pipe.hgetall(stored)
            if not raw:
                raise KeyNotFoundError(key_id)
            record = KeyRecord.from_hash(raw)
            if record.revoked:
                raise KeyRevokedError(key_id)
            updated = replace(record, limits=record.limits.merged(changes, cleared))
            if not isinstance(models, _Keep):
                updated = replace(updated, models=frozenset(models) if models is not None else None)
            if not isinstance(expires_at, _Keep):
                updated = replace(updated, expires_at=expires_at)
            pipe.multi()  # type: ignore[no-untyped-call]  # untyped in redis-py
            pipe.hset(stored, mapping=updated.fields())
            if updated.expires_at is None:
                pipe.hdel(stored, "expires_at")
            pipe.publish(redis_keys.KEY_INVALIDATIONS, secret_hash)
            if journal is not None:
                journal.write(
                    pipe,
                    "key.updated",
                    team=record.team,
                    key_id=key_id,
                    before=record.changeable(),
                    after=updated.changeable(),
                )
            return updated

        return cast(KeyRecord, await self._redis.transaction(update, pointer, value_from_callable=True))

    async def team(self, name: str) -> dict[str, object]:
        """The team's name, created_at and limits (as the admin API shows them)."""
        raw = await self._redis.hmget(redis_keys.team(name), TEAM_FIELDS)
        if not raw[0]:
            raise TeamNotFoundError(name)
        return team_view(name, raw)

    async def teams(self) -> list[dict[str, object]]:
        """Every team as `team` shows it, in two round trips."""
        names = await self.list_teams()
        async with self._redis.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hmget(redis_keys.team(name), TEAM_FIELDS)
            raws = await pipe.execute()
        # A team deleted between the two reads is left out, not shown half.
        return [team_view(name, raw) for name, raw in zip(names, raws, strict=True) if raw[0]]

    async def delete_team(
        self, name: str, *, journal: Journal | None, forget: Callable[[str], None] | None = None
    ) -> list[str]:
        """Revokes every key of the team and removes it: see gateway/keys/deletion.py."""
        return await deletion.delete_team(
            self._redis, name, journal=journal, forget=forget, keep_s=_RETIRED_RECORD_SLACK_S
        )

    async def team_exists(self, name: str) -> bool:
        return bool(await self._redis.sismember(redis_keys.TEAMS, name))

    async def list_teams(self) -> list[str]:
        return sorted(redis_keys.as_text(m) for m in await self._redis.smembers(redis_keys.TEAMS))

    async def create_key(
        self,
        team: str,
        *,
        name: str = "",
        models: Sequence[str] | None = None,
        limits: LimitSet = NO_LIMITS,
        expires_at: float | None = None,
        journal: Journal | None = None,
    ) -> tuple[KeyRecord, str]:
        """Returns the record and the secret; the secret is not stored and cannot be shown again."""
        record = KeyRecord(
            id="key_" + secrets.token_hex(8),
            team=team,
            name=name,
            models=frozenset(models) if models is not None else None,
            limits=limits,
            created_at=time.time(),
            revoked_at=None,
            expires_at=expires_at,
        )
        secret, secret_hash = _new_secret()

        async def create(pipe: Pipeline) -> None:
            # Under WATCH of the team's record and key set: a team deleted meanwhile either sees
            # this key (and revokes it) or makes this creation retry and find no team.
            if not await pipe.exists(redis_keys.team(team)):
                raise TeamNotFoundError(team)
            pipe.multi()  # type: ignore[no-untyped-call]  # untyped in redis-py
            pipe.hset(redis_keys.key_by_hash(secret_hash), mapping=record.fields())
            pipe.set(redis_keys.key_hash_by_id(record.id), secret_hash)
            pipe.sadd(redis_keys.team_keys(team), record.id)
            if journal is not None:
                after = {"name": record.name, **record.changeable()}
                journal.write(pipe, "key.created", team=team, key_id=record.id, before={}, after=after)

        await self._redis.transaction(create, redis_keys.team(team), redis_keys.team_keys(team))
        return record, secret

    async def rotate(
        self, key_id: str, grace_s: float, *, journal: Journal | None = None
    ) -> tuple[KeyRecord, str]:
        """A new secret for the same key; the old one keeps working for `grace_s`, then stops."""
        old_hash, record = await self._current(key_id)
        if record.revoked:
            raise KeyNotFoundError(key_id)
        secret, secret_hash = _new_secret()
        grace_ends = time.time() + grace_s
        old_ends = grace_ends if record.expires_at is None else min(grace_ends, record.expires_at)
        old_key = redis_keys.key_by_hash(old_hash)
        retired = redis_keys.retired_key_hashes(key_id)
        keep_s = math.ceil(grace_s) + _RETIRED_RECORD_SLACK_S
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(redis_keys.key_by_hash(secret_hash), mapping=record.fields())
            pipe.set(redis_keys.key_hash_by_id(key_id), secret_hash)
            pipe.hset(old_key, "expires_at", repr(old_ends))
            pipe.expire(old_key, keep_s)
            pipe.sadd(retired, old_hash)
            pipe.expire(retired, keep_s)
            pipe.publish(redis_keys.KEY_INVALIDATIONS, old_hash)
            if journal is not None:
                journal.write(
                    pipe,
                    "key.rotated",
                    team=record.team,
                    key_id=key_id,
                    before={"previous_secret_expires_at": record.expires_at},
                    after={"previous_secret_expires_at": old_ends, "grace_seconds": grace_s},
                )
            await pipe.execute()
        return record, secret

    async def _current(self, key_id: str) -> tuple[str, KeyRecord]:
        if not KEY_ID_RE.fullmatch(key_id):
            raise KeyNotFoundError(key_id)
        secret_hash_raw = await self._redis.get(redis_keys.key_hash_by_id(key_id))
        if not secret_hash_raw:
            raise KeyNotFoundError(key_id)
        secret_hash = redis_keys.as_text(secret_hash_raw)
        raw = await self._redis.hgetall(redis_keys.key_by_hash(secret_hash))
        if not raw:
            raise KeyNotFoundError(key_id)
        return secret_hash, KeyRecord.from_hash(raw)

    async def lookup(self, secret_hash: str) -> KeyRecord | None:
        raw = await self._redis.hgetall(redis_keys.key_by_hash(secret_hash))
        return KeyRecord.from_hash(raw) if raw else None

    async def list_keys(self, team: str) -> list[KeyRecord]:
        members = await self._redis.smembers(redis_keys.team_keys(team))
        return await self._records(sorted(redis_keys.as_text(m) for m in members))

    async def list_all_keys(self) -> list[KeyRecord]:
        """Every key of every team, by team then creation time: three round trips in all."""
        teams = await self.list_teams()
        async with self._redis.pipeline(transaction=False) as pipe:
            for team in teams:
                pipe.smembers(redis_keys.team_keys(team))
            sets = await pipe.execute()
        ids = sorted(redis_keys.as_text(m) for members in sets for m in members)
        records = await self._records(ids)
        return sorted(records, key=lambda r: (r.team, r.created_at))

    async def _records(self, ids: list[str]) -> list[KeyRecord]:
        if not ids:
            return []
        hashes = await self._redis.mget([redis_keys.key_hash_by_id(i) for i in ids])
        async with self._redis.pipeline(transaction=False) as pipe:
            for secret_hash in hashes:
                if secret_hash:
                    pipe.hgetall(redis_keys.key_by_hash(redis_keys.as_text(secret_hash)))
            raws = await pipe.execute()
        records = await self._with_last_use([KeyRecord.from_hash(raw) for raw in raws if raw])
        return sorted(records, key=lambda r: r.created_at)

    async def _with_last_use(self, records: list[KeyRecord]) -> list[KeyRecord]:
        """The records with `last_used_at` filled in: one more round trip, for all their teams."""
        if not records:
            return records
        teams = sorted({r.team for r in records})
        async with self._redis.pipeline(transaction=False) as pipe:
            for team in teams:
                pipe.hgetall(redis_keys.key_last_used(team))
            raws = await pipe.execute()
        used = {
            (team, redis_keys.as_text(k)): float(v)
            for team, raw in zip(teams, raws, strict=True)
            for k, v in raw.items()
        }
        return [replace(r, last_used_at=used.get((r.team, r.id))) for r in records]

    async def key(self, key_id: str) -> KeyRecord:
        """The key's current record, with when it was last used; KeyNotFoundError if none."""
        _, record = await self._current(key_id)
        return (await self._with_last_use([record]))[0]

    async def revoke(self, key_id: str, *, journal: Journal | None = None) -> tuple[KeyRecord, list[str]]:
        """Marks the key, and every secret a rotation left alive, revoked; returns the record and
        the hashes so this replica can drop them at once (others hear it on the channel)."""
        secret_hash, current = await self._current(key_id)
        retired = await self._redis.smembers(redis_keys.retired_key_hashes(key_id))
        hashes = [secret_hash, *(redis_keys.as_text(h) for h in retired)]
        now = repr(time.time())
        async with self._redis.pipeline(transaction=True) as pipe:
            for hashed in hashes:
                # Only records that still exist; HSETNX keeps the first revocation time.
                if hashed == secret_hash or await self._redis.exists(redis_keys.key_by_hash(hashed)):
                    pipe.hsetnx(redis_keys.key_by_hash(hashed), "revoked_at", now)
                pipe.publish(redis_keys.KEY_INVALIDATIONS, hashed)
            if journal is not None:
                # HSETNX keeps a first revocation's time: revoking again changes nothing.
                revoked_at = current.revoked_at
                after = {"revoked_at": revoked_at if revoked_at is not None else float(now)}
                journal.write(
                    pipe,
                    "key.revoked",
                    team=current.team,
                    key_id=key_id,
                    before={"revoked_at": revoked_at},
                    after=after,
                )
            await pipe.execute()
        _, record = await self._current(key_id)
        return record, hashes


def new_team_id() -> str:
    """Random, not derived from the name: a re-created team of the same name gets another."""
    return "team_" + secrets.token_hex(16)


def _new_secret() -> tuple[str, str]:
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    return secret, hash_secret(secret)
