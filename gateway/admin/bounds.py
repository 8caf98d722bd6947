"""A team admin's keys stay inside their team's limits: a key may be stricter than its team, never
looser. A team's limits bind every key of it anyway; what this refuses is the request that says
otherwise (a key of 1,000 rpm in a team of 100), and the one place a key's value is not capped by
its team's, the priority band, which a team admin could otherwise raise above what the platform
gave the team. Platform admins set whatever they like (they set the team's limits too).
"""

from __future__ import annotations

from gateway.errors import ErrorCode, GatewayError
from gateway.limits.spec import COST_FIELDS, LimitSet
from gateway.pricing import amount, from_nano

_CAPPED = ("rpm", "tpm", "max_concurrency", "daily_tokens", "monthly_tokens", *COST_FIELDS)
DEFAULT_PRIORITY = 5  # a team without one is in the middle band (gateway/routing/share.py)


def within_team(key: LimitSet, team: LimitSet, team_name: str) -> None:
    """Raises a 403 naming the first field above the team's; per-model limits are compared with
    the team's for that model, or with its overall limit."""
    for name in _CAPPED:
        _check(getattr(key, name), getattr(team, name), name, team_name)
    if key.priority is not None and key.priority > (team.priority or DEFAULT_PRIORITY):
        _refuse("priority", team.priority or DEFAULT_PRIORITY, team_name)
    for model, own in key.per_model.items():
        team_model = team.for_model(model)
        for name in _CAPPED:
            ceiling = getattr(team_model, name, None) if team_model is not None else None
            _check(
                getattr(own, name), ceiling or getattr(team, name), f"model_limits.{model}.{name}", team_name
            )


def _check(value: int | None, ceiling: int | None, name: str, team_name: str) -> None:
    if value is not None and ceiling is not None and value > ceiling:
        _refuse(name, ceiling, team_name)


def _refuse(name: str, ceiling: int, team_name: str) -> None:
    # Money is nano-units in here, the decimal string the admin wrote out there.
    shown = amount(from_nano(ceiling)) if name in COST_FIELDS else str(ceiling)
    raise GatewayError(
        ErrorCode.FORBIDDEN,
        f"'{name}' is above team '{team_name}''s own ({shown}): a team admin's keys stay within "
        "their team's limits; a platform-admin changes the team's.",
        param=name,
    )
