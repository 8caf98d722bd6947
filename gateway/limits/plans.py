"""Each request's limits: `plan()` builds them, `LimitPlans` keeps the part that does not move
per key.

A key's and its team's rate and concurrency limits (and their per-model ones) are the same
`Limit` objects for every request of that key to that model, until either limit set changes;
building them anew each time cost a dozen dataclasses and f-strings per request. A budget's
counter key and period end are kept for the UTC day; its `Limit` is built per request, as the
seconds left in its period move with the clock.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from gateway.errors import ErrorCode, GatewayError
from gateway.limits.admission import Limit, LimitKind
from gateway.limits.spec import LimitSet, TokenCount
from gateway.pricing import Price
from gateway.redis import keys as redis_keys


def scoped(limits: LimitSet, scope: str, who: str, model: str, rl: str) -> list[Limit]:
    """The limits of one team or key, plus those it sets for `model`. `scope`: `key:<id>` or
    `team`, the start of each limit's Redis key after the team's `rl` (keys.rate_limits)."""
    whose = scope.split(":", 1)[0]
    out: list[Limit] = []
    for subject, where in ((limits, ""), (limits.for_model(model), f":m:{model}")):
        if subject is None:
            continue
        label = f"{who}" + (f" on model {model}" if where else "")
        only = model if where else None
        key = f"{scope}{where}"
        if subject.rpm:
            out.append(
                Limit(
                    LimitKind.REQUESTS,
                    rl + f"{key}:rpm",
                    subject.rpm,
                    f"{label} requests per minute",
                    scope=whose,
                    name="rpm",
                    model=only,
                )
            )
        if subject.tpm:
            out.append(
                Limit(
                    LimitKind.TOKENS,
                    rl + f"{key}:tpm",
                    subject.tpm,
                    f"{label} tokens per minute",
                    counts=TokenCount(subject.tpm_counts),
                    scope=whose,
                    name="tpm",
                    model=only,
                )
            )
        if subject.max_concurrency:
            out.append(
                Limit(
                    LimitKind.CONCURRENCY,
                    rl + f"{key}:conc",
                    subject.max_concurrency,
                    f"{label} concurrent requests",
                    scope=whose,
                    name="max_concurrency",
                    model=only,
                )
            )
    return out


def plan(
    team: str,
    team_limits: LimitSet,
    key_id: str,
    key_limits: LimitSet,
    model: str,
    now: dt.datetime,
    price: Price | None = None,
) -> list[Limit]:
    """Every limit one request of `key_id` (of `team`) to `model` (at `price`) must pass."""
    rl = redis_keys.rate_limits(team)  # every key below starts with it
    limits = scoped(key_limits, f"key:{key_id}", f"key {key_id}", model, rl)
    limits += scoped(team_limits, "team", f"team {team}", model, rl)
    limits += budgets(key_limits, f"key:{key_id}:", f"key {key_id}", rl, now, price)
    limits += budgets(team_limits, "", f"team {team}", rl, now, price)
    return limits


def budgets(
    limits: LimitSet, prefix: str, who: str, rl: str, now: dt.datetime, price: Price | None = None
) -> list[Limit]:
    """The daily and monthly token and money budgets of a team (`prefix` "") or of a key in it
    (`key:<id>:`): one counter per UTC period, so a new period starts at zero without anyone
    resetting it. `rl`: the team's keys.rate_limits."""
    return [at(now) for at in budget_periods(limits, prefix, who, rl, now, price)]


def require_price(limits: list[Limit], model: str) -> None:
    """A money budget cannot count what a model without a price costs: a request to one is
    refused (403), rather than served free past the budget. Budgets are set at run time (admin
    API), so this is the first place that sees both."""
    for limit in limits:
        if limit.kind is LimitKind.MONEY and limit.price is None:
            raise GatewayError(
                ErrorCode.MODEL_NOT_ALLOWED,
                f"Model '{model}' has no price in the model table, and {limit.description} is a "
                "money budget that cannot count it; ask an operator to price the model.",
            )


@dataclass(frozen=True, slots=True)
class BudgetPeriod:
    """One budget's limit in the period `now` falls in, but for the seconds left: its counter's
    key and its end are the same all day (`gateway.limits.plans` keeps them per UTC day)."""

    limit: Limit
    end: dt.datetime

    def __call__(self, now: dt.datetime) -> Limit:
        limit = self.limit
        return Limit(
            limit.kind,
            limit.redis_key,
            limit.amount,
            limit.description,
            period_s=(self.end - now).total_seconds(),
            scope=limit.scope,
            name=limit.name,
            price=limit.price,
        )


def budget_periods(
    limits: LimitSet, prefix: str, who: str, rl: str, now: dt.datetime, price: Price | None = None
) -> list[BudgetPeriod]:
    """`budgets()`, each as its period that holds `now`. Money budgets (`daily_cost`,
    `monthly_cost`) count nano-units at `price`, on counters of their own."""
    out: list[BudgetPeriod] = []
    scope = "key" if prefix else "team"
    tomorrow = dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time(), dt.UTC)
    first = now.date().replace(day=1)
    next_month = dt.datetime.combine((first + dt.timedelta(days=32)).replace(day=1), dt.time(), dt.UTC)
    day, month = now.date().isoformat(), f"{first:%Y-%m}"
    tokens, money = LimitKind.BUDGET, LimitKind.MONEY
    for amount, kind, name, what, key, end in (
        (limits.daily_tokens, tokens, "daily_tokens", "daily tokens", f"d:{day}", tomorrow),
        (limits.monthly_tokens, tokens, "monthly_tokens", "monthly tokens", f"m:{month}", next_month),
        (limits.daily_cost, money, "daily_cost", "daily cost (money)", f"cd:{day}", tomorrow),
        (limits.monthly_cost, money, "monthly_cost", "monthly cost (money)", f"cm:{month}", next_month),
    ):
        if amount:
            limit = Limit(
                kind,
                rl + f"{prefix}budget:{key}",
                amount,
                f"{who} {what}",
                scope=scope,
                name=name,
                price=price if kind is LimitKind.MONEY else None,
            )
            out.append(BudgetPeriod(limit, end))
    return out


# Entries are (team, key id, model) a replica has served: far fewer in practice; past this the
# map starts again rather than growing with keys that have come and gone.
_MAX_KEPT = 10_000


class _Kept:
    __slots__ = ("budgets", "day", "fixed", "has_budgets", "key_limits", "price", "rl", "team_limits")

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
            or key_limits.daily_cost
            or key_limits.monthly_cost
            or team_limits.daily_cost
            or team_limits.monthly_cost
        )
        self.day: dt.date | None = None  # the UTC day `budgets` are for
        self.budgets: tuple[BudgetPeriod, ...] = ()
        self.price: Price | None = None  # the price money budgets in `budgets` count at


class LimitPlans:
    """`plan()` as it gives them, remembered per (team, key, model) while the key's
    and the team's `LimitSet`s are the same (a key record read again is a new, equal one). For a
    request to be served: a model without a price under a money budget is refused (require_price)."""

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
        price: Price | None = None,
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
        if kept.day != day or kept.price is not price:
            periods = budget_periods(key_limits, f"key:{key_id}:", f"key {key_id}", kept.rl, now, price)
            periods += budget_periods(team_limits, "", f"team {team}", kept.rl, now, price)
            kept.budgets, kept.day, kept.price = tuple(periods), day, price
        limits += [at(now) for at in kept.budgets]
        if price is None:
            require_price(limits, model)
        return limits
