"""Each request's limits (`admission.plan`), with the part that does not move kept per key.

A key's and its team's rate and concurrency limits (and their per-model ones) are the same
`Limit` objects for every request of that key to that model, until either limit set changes;
building them anew each time cost a dozen dataclasses and f-strings per request. A budget's
counter key and period end are kept for the UTC day; its `Limit` is built per request, as the
seconds left in its period move with the clock.
"""

from __future__ import annotations

import datetime as dt

from gateway.limits.admission import BudgetPeriod, Limit, budget_periods, scoped
from gateway.limits.spec import LimitSet
from gateway.redis import keys as redis_keys

# Entries are (team, key id, model) a replica has served: far fewer in practice; past this the
# map starts again rather than growing with keys that have come and gone.
_MAX_KEPT = 10_000


class _Kept:
    __slots__ = ("budgets", "day", "fixed", "has_budgets", "key_limits", "rl", "team_limits")

    def __init__(
        self, key_limits: LimitSet, team_limits: LimitSet, fixed: tuple[Limit, ...], rl: str
    ) -> None:
        self.key_limits = key_limits
        self.team_limits = team_limits
        self.fixed = fixed
        self.rl = rl
        self.has_budgets = bool(
            key_limits.daily_tokens
            or key_limits.monthly_tokens
            or team_limits.daily_tokens
            or team_limits.monthly_tokens
        )
        self.day: dt.date | None = None  # the UTC day `budgets` are for
        self.budgets: tuple[BudgetPeriod, ...] = ()


class LimitPlans:
    """`plan()` as `admission.plan` gives it, remembered per (team, key, model) while the key's
    and the team's `LimitSet`s are the same (a key record read again is a new, equal one)."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str, str], _Kept] = {}

    def plan(
        self,
        team: str,
        team_limits: LimitSet,
        key_id: str,
        key_limits: LimitSet,
        model: str,
        now: dt.datetime,
    ) -> list[Limit]:
        entry = (team, key_id, model)
        kept = self._kept.get(entry)
        # The same sets, or equal ones (a key record read again): `is` first, the cheap test.
        if (
            kept is None
            or not (kept.key_limits is key_limits or kept.key_limits == key_limits)
            or not (kept.team_limits is team_limits or kept.team_limits == team_limits)
        ):
            rl = redis_keys.rate_limits(team)
            fixed = scoped(key_limits, f"key:{key_id}", f"key {key_id}", model, rl)
            fixed += scoped(team_limits, "team", f"team {team}", model, rl)
            if len(self._kept) >= _MAX_KEPT:
                self._kept.clear()
            kept = self._kept[entry] = _Kept(key_limits, team_limits, tuple(fixed), rl)
        limits = list(kept.fixed)
        if not kept.has_budgets:
            return limits
        day = now.date()
        if kept.day != day:
            periods = budget_periods(key_limits, f"key:{key_id}:", f"key {key_id}", kept.rl, now)
            periods += budget_periods(team_limits, "", f"team {team}", kept.rl, now)
            kept.budgets, kept.day = tuple(periods), day
        limits += [at(now) for at in kept.budgets]
        return limits
