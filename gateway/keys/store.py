"""Teams and API keys in Redis. A key's secret is shown once, at creation; only its SHA-256 is kept.

sg:teams                 SET   team names
sg:team:<team>           HASH  name, id, created_at, limits (JSON); `id` is minted at creation, so
                               a team deleted and re-created under its name is another team (its
                               cache salt, its stored responses); a team made before ids existed
                               gets one on its first read (`team_info`)
sg:team:<team>:keys      SET   key ids
sg:key:<sha256>          HASH  the key record (id, team, team_id, name, models, limits (JSON),
                               created_at, revoked_at, expires_at)
sg:keyid:<id>            STR   sha256 of the key's current secret, to find the record by id
sg:keyid:<id>:retired    SET   hashes of secrets a rotation replaced (alive until their grace ends)
sg:{t:<team>}:last-used  HASH  key id -> when it was last used (written by settle.lua, read here)

Every change to what a secret may do (revoke, rotate, new limits) is published on
`sg:keys:invalidate` (the secret's hash, or `team:<name>` for a team's limits), so every replica
drops its cached copy at once. Every change also takes a Journal (the audit log).

Each write is a sequence of one-key steps (gateway/keys/steps.py), the same on one Redis and on a
Redis Cluster, ordered so that a write stopped between two steps leaves nothing a client could
misuse (docs/api.md, "Admin writes, step by step"). `sg:teams` is an index: a name is listed
before its record is made and unlisted after it is gone, and readers skip a name with no record
(a team exists iff its record does). A key's secret is returned only once its record is kept; a
revocation marks the records before anything else; a key names its team's id, so one a team's
deletion did not see dies with the team all the same (gateway.keys.auth).
"""

from __future__ import annotations

import asyncio
import enum
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from gateway.errors import ErrorCode, GatewayError
from gateway.keys import creation, deletion, listing, rotation
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
    hash_secret,
    team_view,
)
from gateway.keys.steps import Checkpoint, RecordScripts, no_checkpoint
from gateway.limits.spec import NO_LIMITS, LimitSet
from gateway.redis import keys as redis_keys
from gateway.redis.breaker import RedisBreaker
from gateway.redis.client import RedisClient
from gateway.redis.keys import EncodableT
from gateway.redis.store import RedisStore, maps_itself, through_breaker
from gateway.redis.subscribe import follow

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
# How long a key's record lives while its creation has not finished: a creation that stopped
# half-way never showed its secret, so its record is of no use to anyone and goes by itself.
UNFINISHED_S = 3600
# Compare-and-set retries before an update gives up (each retry means another change landed).
_MAX_TRIES = 20
# How long an update of a key waits, per try, for a rotation of it to move to its new secret.
_ROTATION_WAIT_S = 0.01


class _Keep(enum.Enum):
    KEEP = "keep"


# update_key's default for `models` and `expires_at`: leave as they are (None means "every model"
# and "never", so it cannot be the default).
KEEP = _Keep.KEEP
_T = TypeVar("_T")


class KeyStore(RedisStore):
    def __init__(
        self,
        redis: RedisClient,
        *,
        breaker: RedisBreaker | None = None,
        checkpoint: Checkpoint = no_checkpoint,
    ) -> None:
        """`breaker`: the app's, for the request path's look-ups (`guarded`) only: the admin's
        writes and the background readers are not counted on it. `checkpoint`: awaited with the
        name of each write step before it runs (a test's seam to stop a write half-way,
        gateway/keys/steps.py)."""
        super().__init__(redis)
        self._breaker = breaker
        self._scripts = RecordScripts(redis)
        self._step = checkpoint

    @property
    def lookups_available(self) -> bool:
        """False while the breaker is open: a call moments ago failed."""
        return self._breaker is None or not self._breaker.open

    @maps_itself  # through the breaker, which maps and counts its failures
    async def guarded(self, call: Callable[[], Awaitable[_T]], *, timeout_s: float, may_probe: bool) -> _T:
        """A look-up on the request path (`call`: `lookup`'s or `team_info`'s, which several
        requests may wait on) through the breaker (gateway.redis.store.through_breaker): refused
        at once while it is open unless `may_probe` (a key never seen here) wins the probe."""
        return await through_breaker(
            self._breaker, "key lookup", call, timeout_s=timeout_s, may_probe=may_probe
        )

    async def create_team(
        self, name: str, limits: LimitSet = NO_LIMITS, *, journal: Journal | None = None
    ) -> dict[str, object]:
        created_at = time.time()
        record = redis_keys.team(name)
        await self._step("team.list")
        await self.redis.sadd(redis_keys.TEAMS, name)
        await self._step("team.create")
        fields: dict[str, EncodableT] = {
            "name": name,
            "id": new_team_id(),
            "created_at": repr(created_at),
            "limits": limits.to_json(),
        }
        if not await self._scripts.create(record, fields):
            raise TeamExistsError(name)
        # Again: a deletion of a team of this name, finishing meanwhile, may have unlisted it
        # after the first (deletion.py lists it back only if it sees this record).
        await self._step("team.relist")
        await self.redis.sadd(redis_keys.TEAMS, name)
        if journal is not None:
            await self._step("team.journal")
            await journal.write("team.created", team=name, before={}, after=limits.as_dict())
        return {"name": name, "created_at": created_at, "limits": limits.as_dict()}

    async def team_limits(self, name: str) -> LimitSet | None:
        """None when the team does not exist."""
        raw = await self.redis.hmget(redis_keys.team(name), ["name", "limits"])
        return LimitSet.from_json(raw[1]) if raw[0] else None

    async def team_info(self, name: str) -> TeamInfo | None:
        """The team's limits and id; None when the team does not exist. A team made before ids
        existed gets one here, once: of two replicas minting at once, the first's stays, and a
        team deleted meanwhile is not brought back as a bare hash with an id (record_swap.lua
        writes only to an existing record)."""
        record = redis_keys.team(name)
        raw = await self.redis.hmget(record, ["name", "limits", "id"])
        if not raw[0]:
            return None
        if not raw[2]:
            await self._scripts.swap(record, {"id": ""}, {"id": new_team_id()})
            raw = await self.redis.hmget(record, ["name", "limits", "id"])
            if not raw[0] or not raw[2]:
                return None
        return TeamInfo(LimitSet.from_json(raw[1]), redis_keys.as_text(raw[2]))

    async def update_team(
        self, name: str, changes: LimitSet, cleared: set[str], *, journal: Journal | None = None
    ) -> LimitSet:
        record = redis_keys.team(name)
        for _ in range(_MAX_TRIES):
            # Read, merge, then write only if the limits are still the ones read: two concurrent
            # updates cannot lose one another, and the journal's old values are the ones replaced.
            raw = await self.redis.hmget(record, ["name", "limits"])
            if not raw[0]:
                raise TeamNotFoundError(name)
            current = LimitSet.from_json(raw[1])
            limits = current.merged(changes, cleared)
            await self._step("team.update")
            expected = {"name": raw[0], "limits": raw[1] or b""}
            written = await self._scripts.swap(
                record, expected, {"limits": limits.to_json()}, publish=f"team:{name}"
            )
            if written < 0:
                raise TeamNotFoundError(name)
            if written:
                break
        else:
            raise _busy("The team is busy with other changes; try again.")
        if journal is not None:
            await self._step("team.journal")
            await journal.write("team.updated", team=name, before=current.as_dict(), after=limits.as_dict())
        return limits

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
        for _ in range(_MAX_TRIES):
            secret_hash, raw = await rotation.current_raw(self.redis, key_id)
            record = KeyRecord.from_hash(raw)
            if record.revoked:
                raise KeyRevokedError(key_id)
            if raw.get(rotation.RETIRED_AT.encode()):
                # A rotation is moving the key to a new secret (a copy of this record): wait
                # for it, then change the new one.
                await asyncio.sleep(_ROTATION_WAIT_S)
                continue
            updated = replace(record, limits=record.limits.merged(changes, cleared))
            if not isinstance(models, _Keep):
                updated = replace(updated, models=frozenset(models) if models is not None else None)
            if not isinstance(expires_at, _Keep):
                updated = replace(updated, expires_at=expires_at)
            # Written only if the record is still the one read (and still not revoked).
            expected = {
                field: raw.get(field.encode(), b"")
                for field in ("id", "revoked_at", "limits", "models", "expires_at", rotation.RETIRED_AT)
            }
            await self._step("key.update")
            written = await self._scripts.swap(
                redis_keys.key_by_hash(secret_hash),
                expected,
                updated.fields(),
                deleted=["expires_at"] if updated.expires_at is None else [],
                publish=secret_hash,
            )
            # A rotation that moved the key to a new secret meanwhile copied the old record: go
            # again, onto the new one (merging the same changes twice gives the same limits).
            if written == 1 and await rotation.pointer(self.redis, key_id) == secret_hash:
                break
        else:
            raise _busy(
                "The key is being rotated; try again. If a rotation of it failed, rotate it again first."
            )
        if journal is not None:
            await self._step("key.journal")
            before, after = record.changeable(), updated.changeable()
            await journal.write("key.updated", team=record.team, key_id=key_id, before=before, after=after)
        return updated

    async def team(self, name: str) -> dict[str, object]:
        """The team's name, created_at and limits (as the admin API shows them)."""
        raw = await self.redis.hmget(redis_keys.team(name), TEAM_FIELDS)
        if not raw[0]:
            raise TeamNotFoundError(name)
        return team_view(name, raw)

    async def teams(self) -> list[dict[str, object]]:
        """Every team as `team` shows it, in two round trips (on a cluster, the second is one per
        node, in parallel: each team's record lives on its own slot)."""
        names = sorted(redis_keys.as_text(m) for m in await self.redis.smembers(redis_keys.TEAMS))
        raws = await listing.each(
            self.redis, [("hmget", redis_keys.team(name), TEAM_FIELDS) for name in names]
        )
        # A name whose record is gone (a deletion meanwhile, or one that stopped half-way) is left
        # out, not shown half.
        return [team_view(name, raw) for name, raw in zip(names, raws, strict=True) if raw[0]]

    async def delete_team(
        self, name: str, *, journal: Journal | None, forget: Callable[[str], None] | None = None
    ) -> list[str]:
        """Revokes every key of the team and removes it: see gateway/keys/deletion.py."""
        return await deletion.delete_team(
            self.redis,
            self._scripts,
            name,
            journal=journal,
            forget=forget,
            keep_s=_RETIRED_RECORD_SLACK_S,
            step=self._step,
        )

    async def team_exists(self, name: str) -> bool:
        return bool(await self.redis.exists(redis_keys.team(name)))

    async def list_teams(self) -> list[str]:
        """Every team's name, sorted; a listed name whose record is gone is left out."""
        return [str(team["name"]) for team in await self.teams()]

    async def create_key(
        self,
        team: str,
        *,
        name: str = "",
        models: Sequence[str] | None = None,
        limits: LimitSet = NO_LIMITS,
        expires_at: float | None = None,
        journal: Journal | None = None,
        created_by: Mapping[str, Any] | None = None,
    ) -> tuple[KeyRecord, str]:
        """Returns the record and the secret; the secret is not stored and cannot be shown again.
        It is returned only once every step has landed (see the module's docstring)."""
        return await creation.create_key(
            self.redis,
            self._scripts,
            team,
            name=name,
            models=models,
            limits=limits,
            expires_at=expires_at,
            journal=journal,
            created_by=created_by,
            step=self._step,
            team_info=self.team_info,
            unfinished_s=UNFINISHED_S,
            keep_s=_RETIRED_RECORD_SLACK_S,
        )

    async def rotate(
        self, key_id: str, grace_s: float, *, journal: Journal | None = None
    ) -> tuple[KeyRecord, str]:
        """A new secret for the same key; the old one keeps working for `grace_s`, then stops
        (gateway/keys/rotation.py)."""
        return await rotation.rotate(
            self.redis,
            self._scripts,
            key_id,
            grace_s,
            journal=journal,
            slack_s=_RETIRED_RECORD_SLACK_S,
            unfinished_s=UNFINISHED_S,
            step=self._step,
            team_info=self.team_info,
        )

    async def lookup(self, secret_hash: str) -> KeyRecord | None:
        raw = await self.redis.hgetall(redis_keys.key_by_hash(secret_hash))
        return KeyRecord.from_hash(raw) if raw else None

    async def list_keys(self, team: str) -> list[KeyRecord]:
        members = await self.redis.smembers(redis_keys.team_keys(team))
        return await listing.records(self.redis, sorted(redis_keys.as_text(m) for m in members))

    async def list_all_keys(self) -> list[KeyRecord]:
        """Every key of every team, by team then creation time: a few round trips in all, each
        fanned out over the nodes on a cluster."""
        teams = await self.list_teams()
        sets = await listing.each(self.redis, [("smembers", redis_keys.team_keys(team)) for team in teams])
        ids = sorted(redis_keys.as_text(m) for members in sets for m in members)
        records = await listing.records(self.redis, ids)
        return sorted(records, key=lambda r: (r.team, r.created_at))

    async def key(self, key_id: str) -> KeyRecord:
        """The key's current record, with when it was last used; KeyNotFoundError if none."""
        _, raw = await rotation.current_raw(self.redis, key_id)
        return (await listing.with_last_use(self.redis, [KeyRecord.from_hash(raw)]))[0]

    async def revoke(self, key_id: str, *, journal: Journal | None = None) -> tuple[KeyRecord, list[str]]:
        """Marks the key, and every secret a rotation left alive, revoked; returns the record and
        the hashes so this replica can drop them at once (others hear it on the channel)."""
        return await rotation.revoke(self.redis, self._scripts, key_id, journal=journal, step=self._step)

    async def follow_invalidations(
        self, forget: Callable[[str], None], all_stale: Callable[[], None]
    ) -> None:
        """Runs until cancelled: each secret hash a key change publishes goes to `forget`;
        `all_stale` after each (re)subscription (what was published while it was down is unknown)."""
        await follow(self.redis, redis_keys.KEY_INVALIDATIONS, forget, all_stale, what="key invalidation")


def _busy(message: str) -> GatewayError:
    """Every compare-and-set lost to another change: the admin may simply try again."""
    return GatewayError(ErrorCode.SERVER_BUSY, message)


def new_team_id() -> str:
    """Random, not derived from the name: a re-created team of the same name gets another."""
    return "team_" + secrets.token_hex(16)
