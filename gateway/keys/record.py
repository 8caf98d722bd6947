"""A key's record as the key store keeps it, the ids and names it checks, and its errors.
Split from gateway/keys/store.py (which re-exports all of it) to keep each module to one concern."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from gateway.errors import ErrorCode, GatewayError
from gateway.limits.spec import LimitSet
from gateway.redis.keys import EncodableT

# Check with fullmatch: `.match` stops at `$`, which also matches before a trailing newline. The
# anchors stay for the OpenAPI schema, whose patterns are unanchored searches.
TEAM_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
# What create_key makes. Checked before an id reaches Redis, so no client-chosen id can name a
# Redis key of another type (`<id>:retired` is a set).
KEY_ID_RE = re.compile(r"key_[0-9a-f]{16}")
KEY_PREFIX = "sk-sg-"
SECRET_RE = re.compile(re.escape(KEY_PREFIX) + r"[A-Za-z0-9_-]{8,}")


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class Journal(Protocol):
    """Where a change is written down (the admin audit log), as one step of the change
    (gateway/keys/steps.py): `before` and `after` are the public values of what changed, never a
    secret or its hash."""

    async def write(
        self,
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


class KeyRevokedError(GatewayError):
    def __init__(self, key_id: str) -> None:
        super().__init__(
            ErrorCode.KEY_REVOKED,
            f"The key '{key_id}' is revoked: a revoked key cannot be changed; create a new one.",
            param="key_id",
        )


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
    # The id of the team the key was made for (TeamInfo.id); None for a key made before keys kept
    # it. A key whose team was deleted (and maybe re-created under its name) never authenticates,
    # even one a deletion racing its creation did not see (gateway.keys.auth).
    team_id: str | None = None
    # Not part of the stored record: settle.lua keeps it per team (redis_keys.key_last_used), and
    # the store fills it in for the admin API's listings. None when unknown or never used.
    last_used_at: float | None = None
    # Who made the key: the audit log's actor (gateway/identity/principal.py); None for a key made
    # before keys kept it. Keys belong to teams: the key outlives its maker's access.
    created_by: Mapping[str, Any] | None = None

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

    def changeable(self) -> dict[str, Any]:
        """What an admin may change on a key, as the audit log records it."""
        return {
            "models": sorted(self.models) if self.models is not None else None,
            "expires_at": self.expires_at,
            **self.limits.as_dict(),
        }

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
            "last_used_at": self.last_used_at,
            "created_by": dict(self.created_by) if self.created_by is not None else None,
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
            team_id=raw[b"team_id"].decode() if raw.get(b"team_id") else None,
            created_by=_actor(raw.get(b"created_by")),
        )

    def fields(self) -> dict[str, EncodableT]:
        fields: dict[str, EncodableT] = {
            "id": self.id,
            "team": self.team,
            "name": self.name,
            "models": orjson.dumps(sorted(self.models)) if self.models is not None else b"",
            "limits": self.limits.to_json(),
            "created_at": repr(self.created_at),
        }
        if self.expires_at is not None:
            fields["expires_at"] = repr(self.expires_at)
        if self.team_id is not None:
            fields["team_id"] = self.team_id
        if self.created_by is not None:
            fields["created_by"] = orjson.dumps(dict(self.created_by))
        return fields

    def belongs_to(self, team: TeamInfo) -> bool:
        """Whether the team the key was made for is `team` (not a team since re-created under
        its name). A key older than team ids trusts the name."""
        return self.team_id is None or self.team_id == team.id


def _actor(raw: bytes | None) -> dict[str, Any] | None:
    if not raw:
        return None
    try:
        actor = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return actor if isinstance(actor, dict) else None


@dataclass(frozen=True, slots=True)
class TeamInfo:
    """What a request needs of its key's team: its limits, and the id minted when it was made
    (what its cache salt and stored responses are bound to, never its name)."""

    limits: LimitSet
    id: str


# A team's record (redis_keys.team): the fields the admin API shows, in this order.
TEAM_FIELDS = ["name", "created_at", "limits"]


def team_view(name: str, raw: list[Any]) -> dict[str, object]:
    """A team as the admin API shows it, from HMGET of TEAM_FIELDS."""
    created_at = float(raw[1]) if raw[1] else None
    return {"name": name, "created_at": created_at, "limits": LimitSet.from_json(raw[2]).as_dict()}
