"""Roles, what each allows, and a caller's permissions: the union of every role they hold.

    platform-admin         everything
    team-admin of T        T's keys (create, update, rotate, revoke) within T's limits; read T's
                           keys, usage and audit entries
    team-viewer of T       read T's keys' metadata (never secrets) and usage
    auditor                read the audit log and the usage of every team

Each action names the roles that allow it on one team and the roles that allow it on every team
(ACTIONS). A refusal names what was needed, so the person knows whom to ask.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.errors import ErrorCode, GatewayError


class Role(enum.StrEnum):
    PLATFORM_ADMIN = "platform-admin"
    TEAM_ADMIN = "team-admin"
    TEAM_VIEWER = "team-viewer"
    AUDITOR = "auditor"

    @property
    def per_team(self) -> bool:
        return self in (Role.TEAM_ADMIN, Role.TEAM_VIEWER)


class Action(enum.Enum):
    ADMINISTER = "administer"  # teams, their limits, role bindings: the platform itself
    READ_PLATFORM = "read_platform"  # every team's audit log, the bindings, the pools
    MANAGE_KEYS = "manage_keys"
    READ_KEYS = "read_keys"
    READ_TEAM = "read_team"
    READ_USAGE = "read_usage"
    READ_AUDIT = "read_audit"


# action -> (roles that allow it on their own team, roles that allow it on every team)
ACTIONS: dict[Action, tuple[frozenset[Role], frozenset[Role]]] = {
    Action.ADMINISTER: (frozenset(), frozenset({Role.PLATFORM_ADMIN})),
    Action.READ_PLATFORM: (frozenset(), frozenset({Role.PLATFORM_ADMIN, Role.AUDITOR})),
    Action.MANAGE_KEYS: (frozenset({Role.TEAM_ADMIN}), frozenset({Role.PLATFORM_ADMIN})),
    Action.READ_KEYS: (frozenset({Role.TEAM_ADMIN, Role.TEAM_VIEWER}), frozenset({Role.PLATFORM_ADMIN})),
    Action.READ_TEAM: (
        frozenset({Role.TEAM_ADMIN, Role.TEAM_VIEWER}),
        frozenset({Role.PLATFORM_ADMIN, Role.AUDITOR}),
    ),
    Action.READ_USAGE: (
        frozenset({Role.TEAM_ADMIN, Role.TEAM_VIEWER}),
        frozenset({Role.PLATFORM_ADMIN, Role.AUDITOR}),
    ),
    Action.READ_AUDIT: (frozenset({Role.TEAM_ADMIN}), frozenset({Role.PLATFORM_ADMIN, Role.AUDITOR})),
}
_ORDER = tuple(Role)


@dataclass(frozen=True, slots=True, order=True)
class Grant:
    """One role a caller holds, and `via`: what gave it (a binding's id, `group:<g>` for the
    bootstrap groups, or `admin-token`), so `whoami` can say why."""

    role: Role
    team: str | None
    via: str

    def as_dict(self) -> dict[str, str | None]:
        return {"role": self.role.value, "team": self.team, "via": self.via}


class Forbidden(GatewayError):
    def __init__(self, action: Action, team: str | None) -> None:
        super().__init__(ErrorCode.FORBIDDEN, _needed(action, team))


def _needed(action: Action, team: str | None) -> str:
    on_team, everywhere = ACTIONS[action]
    wanted = [r.value for r in _ORDER if r in everywhere]
    if on_team and team is not None:
        own = " or ".join(r.value for r in _ORDER if r in on_team)
        return f"This needs the {own} role on team '{team}' (or {' or '.join(wanted)})."
    if on_team:
        own = " or ".join(r.value for r in _ORDER if r in on_team)
        return f"This needs the {own} role on a team (or {' or '.join(wanted)})."
    return f"This needs the {' or '.join(wanted)} role."


class Permissions:
    """What a caller may do: a pure function of their grants."""

    def __init__(self, grants: Iterable[Grant]) -> None:
        self.grants = tuple(sorted(set(grants)))
        self._everywhere = frozenset(g.role for g in self.grants if not g.role.per_team)
        self._teams: dict[Role, frozenset[str]] = {
            role: frozenset(g.team for g in self.grants if g.role is role and g.team is not None)
            for role in (Role.TEAM_ADMIN, Role.TEAM_VIEWER)
        }

    @property
    def empty(self) -> bool:
        return not self.grants

    @property
    def platform_admin(self) -> bool:
        return Role.PLATFORM_ADMIN in self._everywhere

    def allows(self, action: Action, team: str | None) -> bool:
        """May the caller do `action` on `team` (None: on every team at once)?"""
        on_team, everywhere = ACTIONS[action]
        if self._everywhere & everywhere:
            return True
        return team is not None and any(team in self._teams[role] for role in on_team)

    def could(self, action: Action) -> bool:
        """May the caller do `action` on at least one team: the check a route makes before its
        handler finds out which team a call is about."""
        on_team, everywhere = ACTIONS[action]
        return bool(self._everywhere & everywhere) or any(self._teams[role] for role in on_team)

    def teams(self, action: Action) -> frozenset[str] | None:
        """The teams the caller may do `action` on; None: every team."""
        on_team, everywhere = ACTIONS[action]
        if self._everywhere & everywhere:
            return None
        return frozenset().union(*(self._teams[role] for role in on_team))

    def require(self, action: Action, team: str | None) -> None:
        if not self.allows(action, team):
            raise Forbidden(action, team)
