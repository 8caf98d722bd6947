"""Usage rows (gateway.metering.meter.Meter.report) grouped and totalled for people: the admin
API's `usage`, the CLI's table and CSV, and the web console all go through here, so they show the
same columns in the same order.

Cost (gateway/pricing.py): `priced` gives each raw row its cost, a decimal string, before any
grouping, since a team's rows mix models of different prices; grouping and totals then add those
exactly. A raw row's cost is the one recorded with it, at the prices in force when its requests ran
(`cost_source` "recorded"; null if its model had no price then). Rows recorded before costs were
have none: they are priced as today (`cost_source` "repriced"; null if the model has no price now,
or is no longer in the table). A grouped row that mixes the two says "mixed".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal, get_args

from gateway.model_table import ModelConfig
from gateway.pricing import UNPRICED, Price, add, amount, currency_of, from_nano, parse_amount

# The dimensions of a row, then its counters; `api` last, so CSV readers that go by column position
# still read what they did before it came (it is also where Meter.report puts it).
DIMENSIONS = ("team", "key_id", "model", "day")
COUNTERS = ("requests", "prompt_tokens", "completion_tokens", "errors", "disconnects", "total_tokens")
# `cost` and `currency` after `api`, then `cost_source` and `price_version`, for the same reason.
# `served_by` last: null for the model's workers, "overflow:<provider>" for an external provider.
COLUMNS = (*DIMENSIONS, *COUNTERS, "api", "cost", "currency", "cost_source", "price_version", "served_by")
RECORDED, REPRICED, MIXED = "recorded", "repriced", "mixed"

GroupBy = Literal["team", "key", "model", "api", "day"]
GROUP_BYS: tuple[str, ...] = get_args(GroupBy)

# What each grouping keeps of a row; the other dimensions are null in its rows. A key belongs to
# one team, so grouping by key keeps the team too.
_KEPT: dict[str, tuple[str, ...]] = {
    "team": ("team",),
    "key": ("team", "key_id"),
    "model": ("model",),
    "api": ("api",),  # null: usage written before the api was recorded
    "day": ("day",),
}

Row = dict[str, object]


def _count(value: object) -> int:
    return value if isinstance(value, int) else 0


def _blank(kept: Mapping[str, object]) -> Row:
    row: Row = {column: kept.get(column) for column in COLUMNS}
    for counter in COUNTERS:
        row[counter] = 0
    return row


def _add(into: Row, row: Mapping[str, object]) -> None:
    for counter in COUNTERS:
        into[counter] = _count(into[counter]) + _count(row.get(counter))
    cost = row.get("cost")
    if isinstance(cost, str):
        earlier = into.get("cost")
        into["cost"] = (
            cost if not isinstance(earlier, str) else amount(add((parse_amount(earlier), parse_amount(cost))))
        )
        into["currency"] = row.get("currency")
    # A grouped row's price_version stays null: its rows may have several.
    source, earlier_source = row.get("cost_source"), into.get("cost_source")
    if source is not None:
        into["cost_source"] = source if earlier_source in (None, source) else MIXED


def model_prices(models: Iterable[ModelConfig]) -> dict[str, Price]:
    """Each priced model's price, by the name its usage is recorded under."""
    return {model.name: model.price for model in models if model.price is not None}


def priced(rows: Iterable[Mapping[str, object]], prices: Mapping[str, Price]) -> list[Row]:
    """The raw rows (one model and price version each) with `cost` (a decimal string), `currency`
    and `cost_source`: the cost recorded with the row, or, for a row recorded before costs were,
    its tokens times its model's price now (exact); cost and currency null for no price."""
    out: list[Row] = []
    for row in rows:
        version = row.get("price_version")
        if isinstance(version, str):
            currency = currency_of(version)
            cost = None if version == UNPRICED else amount(from_nano(_count(row.get("cost_nano"))))
            out.append({**row, "cost": cost, "currency": currency, "cost_source": RECORDED})
            continue
        price = prices.get(str(row.get("model")))
        cost = None
        if price is not None:
            cost = amount(price.cost(_count(row.get("prompt_tokens")), _count(row.get("completion_tokens"))))
        currency = price.currency if price else None
        out.append({**row, "cost": cost, "currency": currency, "cost_source": REPRICED})
    return out


def group(rows: Iterable[Mapping[str, object]], by: str) -> list[Row]:
    """One row per team, key, model, api or day (`by`), counters summed, in the order of the kept
    columns. Raises ValueError for any other `by` (callers check it against GROUP_BYS first)."""
    if by not in _KEPT:
        raise ValueError(f"group by one of {', '.join(GROUP_BYS)}")
    kept_columns = _KEPT[by]
    grouped: dict[tuple[object, ...], Row] = {}
    for row in rows:
        identity = tuple(row.get(column) for column in kept_columns)
        into = grouped.get(identity)
        if into is None:
            into = grouped[identity] = _blank(dict(zip(kept_columns, identity, strict=True)))
        _add(into, row)
    return [grouped[identity] for identity in sorted(grouped, key=lambda i: tuple(str(v) for v in i))]


def totals(rows: Iterable[Mapping[str, object]]) -> Row:
    """Every counter summed over `rows`; the dimensions are null."""
    total = _blank({})
    for row in rows:
        _add(total, row)
    return total


def ordered(row: Mapping[str, object]) -> Row:
    """A row with exactly COLUMNS, in that order (what the CSV and the JSON show)."""
    return {column: row.get(column) for column in COLUMNS}


# A spreadsheet reads a cell starting with one of these as a formula (CSV injection).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A CSV cell: text a spreadsheet would run as a formula gets a leading `'`, so it shows as the
    text it is (names are checked when made, but a CSV must not count on it); numbers stay numbers."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value
