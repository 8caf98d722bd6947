"""Usage: tokens and requests per day, per team, key, model or client API, over a chosen date
range (settle.lua meters every request by key, model and api already); a stacked
bar chart, the table it is drawn from with errors, disconnects and totals, and a CSV of exactly
that table. When the model table prices models (gateway/pricing.py), cost too: a column, a total
and a chart of it, the exact decimals the admin API gives. Rows come from Meter.report and are
summed and priced by gateway/metering/usage_report.py, as the admin API's and the CLI's are.

The chart's data is a `data-chart` attribute that static/console.js reads (no inline script: the
console's CSP forbids it); without JavaScript the table says the same.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.admin import validation
from gateway.console.web import Console, Page
from gateway.errors import ErrorCode, GatewayError
from gateway.identity.roles import Action
from gateway.metering import money_budgets, usage_report
from gateway.pricing import add, amount, parse_amount

_DEFAULT_DAYS = 7
_MAX_DAYS = 366
_BYS = ("team", "key", "model", "api")
# What usage metered before the api was recorded shows as, per api (its CSV cell stays empty).
NO_API = "(not recorded)"
_METRICS = {"tokens": "total_tokens", "requests": "requests", "cost": "cost"}
COUNTERS = ("requests", "prompt_tokens", "completion_tokens", "total_tokens", "errors", "disconnects")


@dataclass(frozen=True, slots=True)
class Query:
    since: dt.date
    until: dt.date
    team: str
    by: str
    metric: str

    def params(self) -> str:
        return (
            f"since={self.since.isoformat()}&until={self.until.isoformat()}&team={self.team}"
            f"&by={self.by}&metric={self.metric}"
        )


def _date(request: Request, name: str, default: dt.date) -> dt.date:
    return validation.query_date(request.query_params.get(name), name) or default


def parse_query(request: Request) -> Query:
    today = dt.datetime.now(dt.UTC).date()
    until = _date(request, "until", today)
    # Near the first day a date can be, the default range is shorter (never an OverflowError).
    earliest = dt.date.min + dt.timedelta(days=_DEFAULT_DAYS - 1)
    since = _date(
        request, "since", until - dt.timedelta(days=_DEFAULT_DAYS - 1) if until >= earliest else dt.date.min
    )
    if since > until:
        raise GatewayError(ErrorCode.INVALID_REQUEST, "'since' must not be after 'until'.", param="since")
    if (until - since).days >= _MAX_DAYS:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST, f"Choose at most {_MAX_DAYS} days at a time.", param="since"
        )
    team = request.query_params.get("team", "").strip()
    if team:
        validation.team_name(team)
    by = request.query_params.get("by", "team")
    metric = request.query_params.get("metric", "tokens")
    return Query(since, until, team, by if by in _BYS else "team", metric if metric in _METRICS else "tokens")


@dataclass(frozen=True, slots=True)
class Table:
    rows: list[dict[str, Any]]  # one per day and team (key, model, api) that has usage
    totals: dict[str, Any]
    days: list[str]  # every day of the range
    currency: str | None  # the prices' currency; None: no model is priced, and no cost is shown


async def _labels(page: Page, query: Query, teams: list[str]) -> dict[object, str]:
    """What a group is shown as, where not its own value: a key by its name and id."""
    if query.by == "api":
        return {None: NO_API}
    if query.by != "key":
        return {}
    labels: dict[object, str] = {}
    for team in teams:
        for key in await page.deps.keystore.list_keys(team):
            labels[key.id] = f"{key.name} ({key.id})" if key.name else key.id
    return labels


async def table(page: Page, query: Query) -> Table:
    if query.team:
        page.require(Action.READ_USAGE, query.team)
        teams = [query.team]
    else:
        visible = page.caller.teams(Action.READ_USAGE)
        teams = [t for t in await page.deps.keystore.list_teams() if visible is None or t in visible]
    prices = usage_report.model_prices(route.model for route in page.deps.router.models())
    rows = usage_report.priced(await page.deps.meter.report(teams, query.since, query.until), prices)
    days = [
        (query.since + dt.timedelta(days=n)).isoformat() for n in range((query.until - query.since).days + 1)
    ]
    column = "key_id" if query.by == "key" else query.by
    labels = await _labels(page, query, teams)
    out: list[dict[str, Any]] = []
    for day in days:
        for grouped in usage_report.group([r for r in rows if r["day"] == day], query.by):
            out.append(
                {
                    "day": day,
                    "group": grouped[column],
                    "label": labels.get(grouped[column], str(grouped[column])),
                    **{c: grouped[c] for c in COUNTERS},
                    "cost": grouped["cost"],
                }
            )
    currency = next(iter(prices.values())).currency if prices else None
    return Table(out, usage_report.totals(rows), days, currency)


def _visible(page: Page, teams: list[str], action: Action) -> list[str]:
    allowed = page.caller.teams(action)
    return [t for t in teams if allowed is None or t in allowed]


def _amount(value: object) -> Decimal:
    return parse_amount(value) if isinstance(value, str) else Decimal(0)


def chart(query: Query, rows: list[dict[str, Any]], days: list[str]) -> dict[str, Any]:
    """What console.js hands Chart.js: one stacked dataset per team (or model). Costs are summed
    exactly and become floats only here, for drawing; the totals and the table show the decimals."""
    column = _METRICS[query.metric]
    groups = sorted({str(r["label"]) for r in rows})
    index = {day: n for n, day in enumerate(days)}
    datasets = []
    for group in groups:
        mine = [row for row in rows if str(row["label"]) == group]
        data: list[int] | list[float]
        if column == "cost":
            data = [float(add(_amount(row["cost"]) for row in mine if row["day"] == day)) for day in days]
        else:
            counts = [0] * len(days)
            for row in mine:
                counts[index[row["day"]]] += int(row[column])
            data = counts
        datasets.append({"label": group, "data": data})
    return {"labels": days, "datasets": datasets, "metric": query.metric}


def total_cost(totals: dict[str, Any]) -> str:
    """The totals' cost, "0" when nothing priced was used."""
    return amount(_amount(totals.get("cost")))


class Usage:
    def __init__(self, console: Console) -> None:
        self._console = console

    async def index(self, request: Request, page: Page) -> Response:
        try:
            query = parse_query(request)
        except GatewayError as exc:
            today = dt.datetime.now(dt.UTC).date()
            query = Query(today - dt.timedelta(days=_DEFAULT_DAYS - 1), today, "", "team", "tokens")
            return await self._render(request, page, query, error=exc.message, status=exc.status)
        return await self._render(request, page, query)

    async def _render(
        self, request: Request, page: Page, query: Query, *, error: str | None = None, status: int = 200
    ) -> Response:
        found = await table(page, query)
        if found.currency is None and query.metric == "cost":
            query = Query(query.since, query.until, query.team, query.by, "tokens")
        context = {
            "query": query,
            "rows": found.rows,
            "totals": found.totals,
            "total_cost": total_cost(found.totals),
            "currency": found.currency,
            "metrics": [m for m in _METRICS if m != "cost" or found.currency],
            "counters": COUNTERS,
            "bys": _BYS,
            "chart": orjson.dumps(chart(query, found.rows, found.days)).decode(),
            "teams": _visible(page, await page.deps.keystore.list_teams(), Action.READ_USAGE),
            "error": error,
            "budgets": (
                await money_budgets.for_team(
                    page.deps.keystore, page.deps.meter, page.deps.router, query.team
                )
                if query.team
                else []
            ),
        }
        return self._console.render(request, "usage.html", context, session=page.session, status=status)

    async def csv(self, request: Request, page: Page) -> Response:
        query = parse_query(request)
        found = await table(page, query)
        out = io.StringIO()
        writer = csv.writer(out)
        # The cost column only when models are priced: the same columns as the page's table.
        cost_columns = ["cost", "currency"] if found.currency else []
        writer.writerow(["day", query.by, *COUNTERS, *cost_columns])
        for row in found.rows:
            # Empty for a model without a price, as in the admin API's CSV.
            costs = [row["cost"], row["cost"] and found.currency] if found.currency else []
            writer.writerow(
                [
                    usage_report.csv_cell(row["day"]),
                    usage_report.csv_cell(row["group"]),
                    *(row[c] for c in COUNTERS),
                    *costs,
                ]
            )
        name = f"sluicegate-usage-{query.since.isoformat()}-{query.until.isoformat()}.csv"
        return Response(
            out.getvalue(),
            media_type="text/csv",
            headers={"content-disposition": f'attachment; filename="{name}"'},
        )
