"""Teams and API keys in Redis. A key's secret is shown once, at creation; only its SHA-256 is kept.

sg:teams                 SET   team names
sg:team:<team>           HASH  name, created_at
sg:team:<team>:keys      SET   key ids
sg:key:<sha256>          HASH  the key record (id, team, name, models, rpm, created_at, revoked_at)
sg:keyid:<id>            STR   sha256 of the key's secret, to find the record by id
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.typing import EncodableT, FieldT

from gateway import redis_keys

TEAM_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
KEY_PREFIX = "sk-sg-"
SECRET_RE = re.compile(re.escape(KEY_PREFIX) + r"[A-Za-z0-9_-]{8,}")


class TeamExistsError(Exception):
    pass


class TeamNotFoundError(Exception):
    pass


class KeyNotFoundError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class KeyRecord:
    id: str
    team: str
    name: str
    models: frozenset[str] | None  # None: every model
    rpm: int | None  # None: no request-rate limit
    created_at: float
    revoked_at: float | None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def may_use(self, model: str) -> bool:
        return self.models is None or model in self.models

    def public(self) -> dict[str, object]:
        """What the admin API shows: never the secret, never its hash."""
        return {
            "id": self.id,
            "team": self.team,
            "name": self.name,
            "models": sorted(self.models) if self.models is not None else None,
            "rpm": self.rpm,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
            "revoked": self.revoked,
        }

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any]) -> KeyRecord:
        models = orjson.loads(raw[b"models"]) if raw.get(b"models") else None
        rpm = raw.get(b"rpm")
        revoked_at = raw.get(b"revoked_at")
        return cls(
            id=raw[b"id"].decode(),
            team=raw[b"team"].decode(),
            name=raw.get(b"name", b"").decode(),
            models=frozenset(models) if models is not None else None,
            rpm=int(rpm) if rpm else None,
            created_at=float(raw[b"created_at"]),
            revoked_at=float(revoked_at) if revoked_at else None,
        )


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class KeyStore:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def create_team(self, name: str) -> dict[str, object]:
        created_at = time.time()
        added = await self._redis.sadd(redis_keys.TEAMS, name)
        if not added:
            raise TeamExistsError(name)
        await self._redis.hset(redis_keys.team(name), mapping={"name": name, "created_at": repr(created_at)})
        return {"name": name, "created_at": created_at}

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
        rpm: int | None = None,
    ) -> tuple[KeyRecord, str]:
        """Returns the record and the secret; the secret is not stored and cannot be shown again."""
        if not await self.team_exists(team):
            raise TeamNotFoundError(team)
        secret = KEY_PREFIX + secrets.token_urlsafe(32)
        record = KeyRecord(
            id="key_" + secrets.token_hex(8),
            team=team,
            name=name,
            models=frozenset(models) if models is not None else None,
            rpm=rpm,
            created_at=time.time(),
            revoked_at=None,
        )
        secret_hash = hash_secret(secret)
        fields: dict[FieldT, EncodableT] = {
            "id": record.id,
            "team": team,
            "name": name,
            "models": orjson.dumps(sorted(record.models)) if record.models is not None else b"",
            "rpm": str(rpm) if rpm is not None else "",
            "created_at": repr(record.created_at),
        }
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(redis_keys.key_by_hash(secret_hash), mapping=fields)
            pipe.set(redis_keys.key_hash_by_id(record.id), secret_hash)
            pipe.sadd(redis_keys.team_keys(team), record.id)
            await pipe.execute()
        return record, secret

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

    async def revoke(self, key_id: str) -> tuple[KeyRecord, str]:
        """Marks the key revoked; returns it and its hash so caches can drop it at once."""
        secret_hash_raw = await self._redis.get(redis_keys.key_hash_by_id(key_id))
        if not secret_hash_raw:
            raise KeyNotFoundError(key_id)
        secret_hash = redis_keys.as_text(secret_hash_raw)
        record_key = redis_keys.key_by_hash(secret_hash)
        # HSETNX keeps the first revocation time when a key is revoked twice.
        await self._redis.hsetnx(record_key, "revoked_at", repr(time.time()))
        raw = await self._redis.hgetall(record_key)
        if not raw:
            raise KeyNotFoundError(key_id)
        return KeyRecord.from_hash(raw), secret_hash
