"""Who made an admin call, as the audit log and `GET /admin/v1/me` name them.

person   an IdP's access token issued to someone who signed in
service  an IdP's access token from the client-credentials grant: its subject is a client id
         (RFC 9068 §2.2), never presented as a person
token    the break-glass SLUICEGATE_ADMIN_TOKEN: nobody in particular
system   the gateway itself
scim     the identity provider's SCIM client (SLUICEGATE_SCIM_TOKEN, gateway/scim/): provisioning
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class Kind(enum.StrEnum):
    PERSON = "person"
    SERVICE = "service"
    TOKEN = "token"  # noqa: S105 -- a kind of caller, not a secret
    SYSTEM = "system"
    ANONYMOUS = "anonymous"
    SCIM = "scim"


@dataclass(frozen=True, slots=True)
class Principal:
    kind: Kind
    subject: str | None = None  # the subject claim's value (SLUICEGATE_OIDC_SUBJECT_CLAIM)
    issuer: str | None = None
    # Only an email the IdP says it verified: an unverified one names nobody and matches no binding.
    email: str | None = None
    name: str | None = None
    client_id: str | None = None
    groups: frozenset[str] = field(default_factory=frozenset)  # the IdP's token says so
    # What the SCIM directory adds (gateway/identity/directory.py), read on each call, never
    # stored: bindings on groups match either, the bootstrap platform-admin groups only the token's.
    directory_groups: frozenset[str] = field(default_factory=frozenset)

    @property
    def all_groups(self) -> frozenset[str]:
        return self.groups | self.directory_groups

    def actor(self) -> dict[str, Any]:
        """What the audit log writes of the caller: never a token, never a group list."""
        if self.kind is Kind.PERSON:
            return {
                "kind": "person",
                "sub": self.subject,
                "email": self.email,
                "name": self.name,
                "issuer": self.issuer,
            }
        if self.kind is Kind.SERVICE:
            return {"kind": "service", "client_id": self.client_id, "issuer": self.issuer}
        return {"kind": self.kind.value}

    def record(self) -> dict[str, Any]:
        """Everything the principal holds, for a console session kept in Redis."""
        return {
            "kind": self.kind.value,
            "subject": self.subject,
            "issuer": self.issuer,
            "email": self.email,
            "name": self.name,
            "client_id": self.client_id,
            "groups": sorted(self.groups),
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Principal:
        return cls(
            Kind(record["kind"]),
            subject=record.get("subject"),
            issuer=record.get("issuer"),
            email=record.get("email"),
            name=record.get("name"),
            client_id=record.get("client_id"),
            groups=frozenset(record.get("groups") or ()),
        )


BREAK_GLASS = Principal(Kind.TOKEN)
SYSTEM = Principal(Kind.SYSTEM)
ANONYMOUS = Principal(Kind.ANONYMOUS)
SCIM = Principal(Kind.SCIM)


def describe(actor: Mapping[str, Any] | None) -> str:
    """An actor in a few words, as the CLI and the console show it: `alice@example.com (Alice)`,
    `service ci-bot`, `admin token`, `SCIM`, `system`; `-` for an entry from before actors were kept."""
    if not actor:
        return "-"
    kind = actor.get("kind")
    if kind == "person":
        who = actor.get("email") or actor.get("sub") or "?"
        return f"{who} ({actor['name']})" if actor.get("name") else str(who)
    if kind == "service":
        return f"service {actor.get('client_id') or '?'}"
    if kind == "token":
        return "admin token"
    if kind == "scim":
        return "SCIM"
    return str(kind or "-")
