"""Teams and API keys in Redis. A key's secret is shown once, at creation; only its SHA-256 is kept.

sg:teams                 SET   team names
sg:team:<team>           HASH  name, created_at, limits (JSON)
sg:team:<team>:keys      SET   key ids
sg:key:<sha256>          HASH  the key record (id, team, name, models, limits (JSON),
                               created_at, revoked_at, expires_at)
sg:keyid:<id>            STR   sha256 of the key's current secret, to find the record by id
sg:keyid:<id>:retired    SET   hashes of secrets a rotation replaced (alive until their grace ends)

Every change to what a secret may do (revoke, rotate, new limits) is published on
`sg:keys:invalidate` (the secret's hash, or `team:<name>` for a team's limits), so every replica
drops its cached copy at once.

Every change also takes a Journal (the admin audit log, gateway/admin/audit.py), whose entry is
queued in the change's own MULTI/EXEC: both land or neither does.
"""

from __future__ import annotations

import hashlib
import math
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, cast

import orjson
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.typing import EncodableT, FieldT

from gateway.errors import ErrorCode, GatewayError
from gateway.limits.spec import NO_LIMITS, LimitSet
from gateway.redis import keys as redis_keys

# Check with fullmatch: `.match` stops at `$`, which also matches before a trailing newline. The
# anchors stay for the OpenAPI schema, whose patterns are unanchored searches.
TEAM_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
# What create_key makes. Checked before an id reaches Redis, so no client-chosen id can name a
# Redis key of another type (`<id>:retired` is a set).
KEY_ID_RE = re.compile(r"key_[0-9a-f]{16}")
KEY_PREFIX = "sk-sg-"
SECRET_RE = re.compile(re.escape(KEY_PREFIX) + r"[A-Za-z0-9_-]{8,}")
# A retired secret's record outlives its grace by this much, so late requests still get a clear
# "expired" instead of "invalid".
_RETIRED_RECORD_SLACK_S = 24 * 3600


class Journal(Protocol):
    """Where a change is written down, on the change's own transaction (`pipe`, after MULTI):
    `before` and `after` are the public values of what changed, never a secret or its hash."""

    def write(
        self,
        pipe: Pipeline,
        action: str,
        *,
        team: str,
        key_id: str | None = None,
        before: Mapping[str, Any],
        after: Mapping[str, Any],
    ) -> None: ...


class TeamExistsError(GatewayError):
    def __init__(self, name: str) -> None:
        super().__init__(ErrorCode.TEAM_EXISTS, f"The team '{name}' already exists.", param="name")


class TeamNotFoundError(GatewayError):
    def __init__(self, name: str) -> None:
        super().__init__(ErrorCode.TEAM_NOT_FOUND, f"The team '{name}' does not exist.", param="team")


class KeyNotFoundError(GatewayError):
    def __init__(self, key_id: str) -> None:
        if KEY_ID_RE.fullmatch(key_id):
            message = f"No key has the id '{key_id}'."
        else:
            # Not echoed: it is not an id, and might be something the caller should not paste.
            message = "No key has the id you gave: key ids look like key_0123456789abcdef."
        super().__init__(ErrorCode.KEY_NOT_FOUND, message, param="key_id")


@dataclass(frozen=True, slots=True)
class KeyRecord:
    id: str
    team: str
    name: str
    models: frozenset[str] | None  # None: every model
    limits: LimitSet
    created_at: float
    revoked_at: float | None
    expires_at: float | None = None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def refusal(self, now: float) -> str | None:
        """Why this secret may not be used at `now` (Unix time), or None."""
        if self.revoked:
            return f"API key {self.id} has been revoked."
        if self.expires_at is not None and now >= self.expires_at:
            return f"API key {self.id} has expired."
        return None

    def may_use(self, model: str) -> bool:
        return self.models is None or model in self.models

    def public(self) -> dict[str, object]:
        """What the admin API shows: never the secret, never its hash."""
        return {
            "id": self.id,
            "team": self.team,
            "name": self.name,
            "models": sorted(self.models) if self.models is not None else None,
            "rpm": self.limits.rpm,
            "limits": self.limits.as_dict(),
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
            "revoked": self.revoked,
            "expires_at": self.expires_at,
        }

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any]) -> KeyRecord:
        models = orjson.loads(raw[b"models"]) if raw.get(b"models") else None
        revoked_at = raw.get(b"revoked_at")
        expires_at = raw.get(b"expires_at")
        return cls(
            id=raw[b"id"].decode(),
            team=raw[b"team"].decode(),
            name=raw.get(b"name", b"").decode(),
            models=frozenset(models) if models is not None else None,
            limits=LimitSet.from_json(raw.get(b"limits")),
            created_at=float(raw[b"created_at"]),
            revoked_at=float(revoked_at) if revoked_at else None,
            expires_at=float(expires_at) if expires_at else None,
        )

    def fields(self) -> dict[FieldT, EncodableT]:
        fields: dict[FieldT, EncodableT] = {
            "id": self.id,
            "team": self.team,
            "name": self.name,
            "models": orjson.dumps(sorted(self.models)) if self.models is not None else b"",
            "limits": self.limits.to_json(),
            "created_at": repr(self.created_at),
        }
        if self.expires_at is not None:
            fields["expires_at"] = repr(self.expires_at)
        return fields


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
                record, mapping={"name": name, "created_at": repr(created_at), "limits": limits.to_json()}
            )
            if journal is not None:
                journal.write(pipe, "team.created", team=name, before={}, after=limits.as_dict())

        await self._redis.transaction(create, record)
        return {"name": name, "created_at": created_at, "limits": limits.as_dict()}

    async def team_limits(self, name: str) -> LimitSet | None:
        """None when the team does not exist."""
        raw = await self._redis.hmget(redis_keys.team(name), ["name", "limits"])
        return LimitSet.from_json(raw[1]) if raw[0] else None

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
        self, key_id: str, changes: LimitSet, cleared: set[str], *, journal: Journal | None = None
    ) -> KeyRecord:
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
            updated = replace(record, limits=record.limits.merged(changes, cleared))
            pipe.multi()  # type: ignore[no-untyped-call]  # untyped in redis-py
            pipe.hset(stored, "limits", updated.limits.to_json())
            pipe.publish(redis_keys.KEY_INVALIDATIONS, secret_hash)
            if journal is not None:
                journal.write(
                    pipe,
                    "key.updated",
                    team=record.team,
                    key_id=key_id,
                    before=record.limits.as_dict(),
                    after=updated.limits.as_dict(),
                )
            return updated

        return cast(KeyRecord, await self._redis.transaction(update, pointer, value_from_callable=True))

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
        if not await self.team_exists(team):
            raise TeamNotFoundError(team)
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
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(redis_keys.key_by_hash(secret_hash), mapping=record.fields())
            pipe.set(redis_keys.key_hash_by_id(record.id), secret_hash)
            pipe.sadd(redis_keys.team_keys(team), record.id)
            if journal is not None:
                after = {
                    "name": record.name,
                    "models": sorted(record.models) if record.models is not None else None,
                    "expires_at": record.expires_at,
                    **record.limits.as_dict(),
                }
                journal.write(pipe, "key.created", team=team, key_id=record.id, before={}, after=after)
            await pipe.execute()
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
        ids = sorted(redis_keys.as_text(m) for m in await self._redis.smembers(redis_keys.team_keys(team)))
        if not ids:
            return []
        hashes = await self._redis.mget([redis_keys.key_hash_by_id(i) for i in ids])
        async with self._redis.pipeline(transaction=False) as pipe:
            for secret_hash in hashes:
                if secret_hash:
                    pipe.hgetall(redis_keys.key_by_hash(redis_keys.as_text(secret_hash)))
            raws = await pipe.execute()
        records = [KeyRecord.from_hash(raw) for raw in raws if raw]
        return sorted(records, key=lambda r: r.created_at)

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


def _new_secret() -> tuple[str, str]:
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    return secret, hash_secret(secret)
