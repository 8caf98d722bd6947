"""Each request's limits (`admission.plan`), with the part that does not move kept per key.

A key's and its team's rate and concurrency limits (and their per-model ones) are the same
`Limit` objects for every request of that key to that model, until either limit set changes;
building them anew each time cost a dozen dataclasses and f-strings per request. The budgets are
built per request: their period (the seconds left in the UTC day and month) moves with the clock.
"""

from __future__ import annotations

import datetime as dt

from gateway.limits.admission import Limit, budgets, scoped
from gateway.limits.spec import LimitSet
from gateway.redis import keys as redis_keys

# Entries are (team, key id, model) a replica has served: far fewer in practice; past this the
# map starts again rather than growing with keys that have come and gone.
_MAX_KEPT = 10_000


class LimitPlans:
    """`plan()` as `admission.plan` gives it, remembered per (team, key, model) while the key's
    and the team's `LimitSet`s are the same (a key record read again is a new, equal one)."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str, str], tuple[LimitSet, LimitSet, tuple[Limit, ...], str]] = {}

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
            or not (kept[0] is key_limits or kept[0] == key_limits)
            or not (kept[1] is team_limits or kept[1] == team_limits)
        ):
            rl = redis_keys.rate_limits(team)
            fixed = scoped(key_limits, f"key:{key_id}", f"key {key_id}", model, rl)
            fixed += scoped(team_limits, "team", f"team {team}", model, rl)
            if len(self._kept) >= _MAX_KEPT:
                self._kept.clear()
            kept = self._kept[entry] = (key_limits, team_limits, tuple(fixed), rl)
        limits = list(kept[2])
        rl = kept[3]
        if key_limits.daily_tokens or key_limits.monthly_tokens:
            limits += budgets(key_limits, f"key:{key_id}:", f"key {key_id}", rl, now)
        if team_limits.daily_tokens or team_limits.monthly_tokens:
            limits += budgets(team_limits, "", f"team {team}", rl, now)
        return limits
