"""Where a signed-in person stands in the company directory that the IdP provisions through
SCIM (gateway/scim/): whether they are still active, and the groups it lists them in.

    Directory.standing(principal) -> Standing(active, groups)
      active  True: provisioned and active; False: deactivated (`active: false`) or deleted (a
              tombstone, for SCIM_TOMBSTONE_TTL_S); None: not in the directory (not provisioned,
              a service, or SCIM off), so the token alone decides
      groups  every SCIM group that lists them, by displayName and by externalId when it has one
              (empty unless active): Okta's groups claim carries names, Entra ID's carries object
              ids, which Entra's SCIM sends as the group's externalId, so a binding written for
              either claim matches the directory's groups too

A person is the SCIM user whose externalId is their subject claim (`sub`, or `oid` on Entra ID),
else whose userName or primary email is their verified email (Principal.email is only ever a
verified one, lower-cased). The admin API (gateway/admin/access.py) asks on every call and the
console on every request, both reading Redis: a deactivation is refused on every replica at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.identity.principal import Kind, Principal
from gateway.scim.store import ScimStore

# Longer than any IdP access token lives (Okta's at most 24 h; Entra ID's about an hour) and than
# a console session (SLUICEGATE_CONSOLE_SESSION_TTL, 8 h by default; the app takes the longer).
SCIM_TOMBSTONE_TTL_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Standing:
    active: bool | None
    groups: frozenset[str] = frozenset()


UNKNOWN = Standing(None)


class Directory:
    """`store` None: SCIM is off (no SLUICEGATE_SCIM_TOKEN), and nobody is looked up."""

    def __init__(self, store: ScimStore | None) -> None:
        self._store = store

    @property
    def store(self) -> ScimStore:
        assert self._store is not None  # the SCIM routes refuse every call before this when off
        return self._store

    async def standing(self, principal: Principal) -> Standing:
        if self._store is None or principal.kind is not Kind.PERSON:
            return UNKNOWN
        user, tombstoned = await self._store.person(principal.subject, principal.email)
        if user is None:
            return Standing(False) if tombstoned else UNKNOWN
        if user.get("active") is False:
            return Standing(False)
        groups = await self._store.groups_of(str(user["id"]))
        names = {str(g[field]) for g in groups for field in ("displayName", "externalId") if g.get(field)}
        return Standing(True, frozenset(names))
