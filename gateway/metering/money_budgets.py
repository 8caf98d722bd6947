"""Where a team's and its keys' money budgets stand, for people: spent, remaining and a
straight-line forecast to the period's end, from the costs recorded with the usage (the same
numbers the usage report sums), as exact decimal strings. Admission counts the same costs in Redis
(gateway/limits, settled to what was recorded); the two differ only by requests still in flight.

The forecast is the period's spend so far stretched evenly over the whole period:
spent x period length / time elapsed, rounded up to a nano-unit.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from decimal import ROUND_CEILING, Context, Decimal

from gateway.keys.store import KeyStore
from gateway.limits.spec import LimitSet
from gateway.metering import usage_report
from gateway.metering.meter import Meter
from gateway.pricing import add, amount, from_nano, parse_amount
from gateway.routing.router import Router

_NANO = Decimal("1e-9")
_WIDE = Context(prec=60)  # a forecast's quotient, then rounded up to a nano-unit


def period(name: str, now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The UTC day or calendar month (`daily`, `monthly`) that holds `now`: its start and end."""
    if name == "daily":
        start = dt.datetime.combine(now.date(), dt.time(), dt.UTC)
        return start, start + dt.timedelta(days=1)
    first = now.date().replace(day=1)
    following = (first + dt.timedelta(days=32)).replace(day=1)
    return dt.datetime.combine(first, dt.time(), dt.UTC), dt.datetime.combine(following, dt.time(), dt.UTC)


def _spent(rows: Iterable[Mapping[str, object]], since: dt.date, key_id: str | None) -> Decimal:
    return add(
        parse_amount(str(row["cost"]))
        for row in rows
        if isinstance(row.get("cost"), str)
        and str(row.get("day")) >= since.isoformat()
        and (key_id is None or row.get("key_id") == key_id)
    )


def standing(
    owners: Iterable[tuple[str | None, LimitSet]],
    rows: Iterable[Mapping[str, object]],
    now: dt.datetime,
    currency: str | None,
) -> list[dict[str, object]]:
    """One entry per money budget of `owners` ((None, the team's limits) and (key id, a key's)),
    from `rows`: the team's priced usage rows (usage_report.priced) of at least this month."""
    kept = list(rows)
    out: list[dict[str, object]] = []
    for key_id, limits in owners:
        for name, nano in (("daily", limits.daily_cost), ("monthly", limits.monthly_cost)):
            if not nano:
                continue
            start, end = period(name, now)
            budget = from_nano(nano)
            spent = _spent(kept, start.date(), key_id)
            elapsed = max(1.0, (now - start).total_seconds())
            length = (end - start).total_seconds()
            forecast = _WIDE.divide(_WIDE.multiply(spent, Decimal(length)), Decimal(elapsed))
            out.append(
                {
                    "owner": "key" if key_id else "team",
                    "key_id": key_id,
                    "period": name,
                    "budget": amount(budget),
                    "spent": amount(spent),
                    "remaining": amount(max(Decimal(0), budget - spent)),
                    "forecast": amount(forecast.quantize(_NANO, rounding=ROUND_CEILING)),
                    "currency": currency,
                    "ends_at": end.isoformat().replace("+00:00", "Z"),
                }
            )
    return out


async def for_team(keystore: KeyStore, meter: Meter, router: Router, team: str) -> list[dict[str, object]]:
    """`standing` of the team's and its active keys' money budgets, now: the admin API's usage
    for a named team and the console's Usage page of one team."""
    team_limits = await keystore.team_limits(team)
    owners: list[tuple[str | None, LimitSet]] = [(None, team_limits)] if team_limits is not None else []
    owners += [(key.id, key.limits) for key in await keystore.list_keys(team) if key.revoked_at is None]
    if not any(limits.daily_cost or limits.monthly_cost for _, limits in owners):
        return []
    now = dt.datetime.now(dt.UTC)
    prices = usage_report.model_prices(r.model for r in router.models())
    rows = usage_report.priced(await meter.report([team], now.date().replace(day=1), now.date()), prices)
    currency = next((price.currency for price in prices.values()), None)
    return standing(owners, rows, now, currency)
