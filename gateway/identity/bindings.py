"""Role bindings: a role given to an IdP group or to one user (their subject, or their verified
email), on one team for the two team roles. Stored in one Redis hash (redis_keys.role_bindings).

A binding's id is derived from what it binds, so binding the same thing twice finds the first
(HSETNX) rather than making a second. A team role's binding remembers the team's id: a team
deleted and re-created under its name is a new team, and the old binding grants nothing on it
(`active` false in listings), as a key made for the old team never works for the new one.
"""

from __future__ import annotations

import enum
import hashlib
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.identity.principal import Principal
from gateway.identity.roles import Grant, Role

MAX_BINDINGS = 10_000
BINDING_ID_RE = re.compile(r"rb_[0-9a-f]{16}")
MAX_SUBJECT_CHARS = 256


class Subject(enum.StrEnum):
    GROUP = "group"
    USER = "user"


@dataclass(frozen=True, slots=True)
class RoleBinding:
    id: str
    subject_kind: Subject
    subject: str
    role: Role
    team: str | None
    team_id: str | None
    created_at: float
    created_by: Mapping[str, Any]

    @classmethod
    def new(
        cls,
        subject_kind: Subject,
        subject: str,
        role: Role,
        team: str | None,
        team_id: str | None,
        created_by: Mapping[str, Any],
    ) -> RoleBinding:
        identity = "\0".join((subject_kind.value, subject, role.value, team or ""))
        binding_id = "rb_" + hashlib.sha256(identity.encode()).hexdigest()[:16]
        return cls(binding_id, subject_kind, subject, role, team, team_id, time.time(), dict(created_by))

    def matches(self, principal: Principal) -> bool:
        if self.subject_kind is Subject.GROUP:
            return self.subject in principal.all_groups
        if self.subject == principal.subject:
            return True
        # principal.email is set only when the IdP verified it, and is lower-cased.
        return principal.email is not None and self.subject.lower() == principal.email

    def active(self, team_ids: Mapping[str, str]) -> bool:
        """Whether it grants anything: a team role only while its team is the one it was made
        for (`team_ids`: each team's current id)."""
        return self.team is None or team_ids.get(self.team) == self.team_id

    def public(self, *, active: bool) -> dict[str, Any]:
        return {
            "id": self.id,
            self.subject_kind.value: self.subject,
            "role": self.role.value,
            "team": self.team,
            "active": active,
            "created_at": self.created_at,
            "created_by": dict(self.created_by),
        }

    def audited(self) -> dict[str, Any]:
        """What the audit log records of the binding."""
        return {"binding": self.id, self.subject_kind.value: self.subject, "role": self.role.value}

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "id": self.id,
                "kind": self.subject_kind.value,
                "subject": self.subject,
                "role": self.role.value,
                "team": self.team,
                "team_id": self.team_id,
                "created_at": self.created_at,
                "created_by": dict(self.created_by),
            }
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> RoleBinding:
        data = orjson.loads(raw)
        return cls(
            id=data["id"],
            subject_kind=Subject(data["kind"]),
            subject=data["subject"],
            role=Role(data["role"]),
            team=data.get("team"),
            team_id=data.get("team_id"),
            created_at=float(data["created_at"]),
            created_by=data.get("created_by") or {},
        )


class TooManyBindings(Exception):
    pass


def grants(
    principal: Principal,
    bindings: Iterable[RoleBinding],
    team_ids: Mapping[str, str],
    platform_admin_groups: frozenset[str],
) -> list[Grant]:
    """Every role `principal` holds: from the bootstrap groups (SLUICEGATE_PLATFORM_ADMIN_GROUPS)
    and from each binding that matches them, a team role only while its team is the one it was
    made for (`team_ids`: each team's current id)."""
    out = [
        Grant(Role.PLATFORM_ADMIN, None, f"group:{g}")
        # The token's own groups only: whoever holds the SCIM token must not be able to make
        # anyone a platform admin by naming a SCIM group after a bootstrap group.
        for g in sorted(principal.groups & platform_admin_groups)
    ]
    for binding in bindings:
        if binding.matches(principal) and binding.active(team_ids):
            out.append(Grant(binding.role, binding.team, binding.id))
    return out
