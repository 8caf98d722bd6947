"""Model prices (gateway/pricing.py): parsed as exact decimals, costs never rounded, grouped usage
priced per model before it is summed, and the price gauge following the model table."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from gateway.errors import ConfigError
from gateway.metering import usage_report
from gateway.model_file import parse_model_table
from gateway.model_table import ModelConfig, ModelTable
from gateway.observability.metrics import Metrics
from gateway.pricing import Price, amount, from_nano, parse_price
from gateway.routing.router import Router


def test_prices_read_as_written_from_strings_and_yaml_numbers() -> None:
    price = parse_price({"input_per_million": "0.15", "output_per_million": 0.6, "currency": "EUR"}, "p")
    assert price == Price(Decimal("0.15"), Decimal("0.6"), "EUR")
    # A float reads as the text that was written, not its binary value 0.59999999999999997779...
    assert str(price.output_per_million) == "0.6"
    assert parse_price({"input_per_million": 2, "output_per_million": "0"}, "p") == Price(
        Decimal(2), Decimal(0), "USD"
    )
    assert parse_price(None, "p") is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"input_per_million": "0.1"}, "p.output_per_million: required"),
        ({"input_per_million": "-1", "output_per_million": "1"}, "p.input_per_million: must be a finite"),
        ({"input_per_million": "NaN", "output_per_million": "1"}, "p.input_per_million: must be a finite"),
        ({"input_per_million": "Infinity", "output_per_million": "1"}, "must be a finite"),
        ({"input_per_million": "abc", "output_per_million": "1"}, "expected a decimal number"),
        ({"input_per_million": True, "output_per_million": "1"}, "expected a decimal number"),
        ({"input_per_million": "1e9", "output_per_million": "1"}, "must be below"),
        ({"input_per_million": "0.0000000000001", "output_per_million": "1"}, "at most 12 decimal places"),
        ({"input_per_million": "1", "output_per_million": "1", "currency": "usd"}, "p.currency"),
        ({"input_per_million": "1", "output_per_million": "1", "per": "token"}, "p.per: unknown field"),
        ("0.15", "p: expected a mapping"),
    ],
)
def test_bad_prices_are_config_errors_naming_the_field(raw: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        parse_price(raw, "p")


def test_costs_are_exact_where_floats_are_not() -> None:
    price = Price(Decimal("0.1"), Decimal("0.2"))
    assert 3 * 0.1 + 3 * 0.2 != 0.9  # what a float report would add up to
    assert amount(price.cost(3_000_000, 3_000_000)) == "0.9"
    assert amount(price.cost(3, 0)) == "0.0000003"
    big = Price(Decimal("999999999.999999999999"), Decimal("0.000000000001"))
    assert big.cost(2**62, 2**62) == (
        Decimal(2**62) * Decimal("999999999.999999999999") + Decimal(2**62) * Decimal("0.000000000001")
    ).scaleb(-6)
    assert amount(Price(Decimal("0.15"), Decimal("0.60")).cost(1_234_567, 89)) == "0.18523845"
    assert amount(Decimal("0E-8")) == "0"
    assert amount(Decimal("150.00").scaleb(3)) == "150000"


def _table(*entries: dict[str, Any]) -> ModelTable:
    return parse_model_table({"models": [{"endpoints": [{"url": "http://w:1"}], **e} for e in entries]})


def test_the_model_table_carries_prices_in_one_currency() -> None:
    table = _table(
        {"name": "a", "price": {"input_per_million": "0.15", "output_per_million": "0.60"}},
        {"name": "b"},
    )
    assert table.models[0].price == Price(Decimal("0.15"), Decimal("0.60"), "USD")
    assert table.models[1].price is None
    with pytest.raises(
        ConfigError, match=r"models\[2\]\.price\.currency: EUR differs from models\[0\]'s USD"
    ):
        _table(
            {"name": "a", "price": {"input_per_million": 1, "output_per_million": 1}},
            {"name": "b"},
            {"name": "c", "price": {"input_per_million": 1, "output_per_million": 1, "currency": "EUR"}},
        )
    with pytest.raises(ConfigError, match=r"models\[0\]\.price\.input_per_million"):
        _table({"name": "a", "price": {"input_per_million": "x", "output_per_million": 1}})


def _row(team: str, model: str, prompt: int, completion: int) -> dict[str, object]:
    return {
        "team": team,
        "key_id": "k1",
        "model": model,
        "day": "2026-01-02",
        "requests": 1,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "errors": 0,
        "disconnects": 0,
        "total_tokens": prompt + completion,
        "api": "chat",
    }


def test_grouped_usage_is_priced_per_model_before_it_is_summed() -> None:
    prices = {"cheap": Price(Decimal("0.1"), Decimal("0.2")), "dear": Price(Decimal("3"), Decimal("15"))}
    rows = usage_report.priced(
        [
            _row("ml", "cheap", 1_000_000, 500_000),  # 0.1 + 0.1
            _row("ml", "dear", 1_000, 2_000),  # 0.003 + 0.03
            _row("ml", "unpriced", 5_000_000, 5_000_000),
            _row("web", "cheap", 7, 0),
        ],
        prices,
    )
    assert [r["cost"] for r in rows] == ["0.2", "0.033", None, "0.0000007"]
    assert [r["currency"] for r in rows] == ["USD", "USD", None, "USD"]
    by_team = {r["team"]: r for r in usage_report.group(rows, "team")}
    assert by_team["ml"]["cost"] == "0.233"  # not the 0.1+0.1+... of a float sum; the unpriced adds 0
    assert by_team["ml"]["total_tokens"] == 1_503_000 + 10_000_000
    assert by_team["web"]["cost"] == "0.0000007"
    assert usage_report.totals(rows)["cost"] == "0.2330007"
    by_model = {r["model"]: r for r in usage_report.group(rows, "model")}
    assert by_model["unpriced"]["cost"] is None
    assert by_model["unpriced"]["currency"] is None
    assert usage_report.totals(usage_report.priced([_row("ml", "unpriced", 1, 1)], prices))["cost"] is None
    # Each column added at the end: readers by position still read what they did.
    last = ["api", "cost", "currency", "cost_source", "price_version", "served_by"]
    assert list(usage_report.ordered(rows[0]))[-6:] == last
    assert {r["cost_source"] for r in rows} == {"repriced"}  # none recorded a cost: today's prices


def test_costs_are_recorded_in_whole_nano_units_rounded_up() -> None:
    price = Price(Decimal("0.15"), Decimal("0.6"))
    assert price.nano_cost(3, 5) == 3_450  # 0.00000345 exactly
    # 12 decimals a million tokens is 18 a token: one token of this costs 1e-18, charged 1e-9.
    tiny = Price(Decimal("0.000000000001"), Decimal(0))
    assert (tiny.nano_cost(1, 0), tiny.nano_cost(0, 0), tiny.nano_cost(10**9, 0)) == (1, 0, 1)
    assert tiny.nano_cost(10**9 + 1, 0) == 2
    assert isinstance(price.nano_cost(10**12, 10**12), int)
    assert amount(from_nano(price.nano_cost(1_234_567, 89))) == amount(price.cost(1_234_567, 89))


def test_a_price_version_names_the_prices_not_how_they_were_written() -> None:
    price = Price(Decimal("0.15"), Decimal("0.6"))
    assert price.version == Price(Decimal("0.150"), Decimal("0.60")).version
    assert price.version.startswith("USD-")
    assert price.version != Price(Decimal("0.15"), Decimal("0.7")).version
    assert price.version != Price(Decimal("0.6"), Decimal("0.15")).version
    assert Price(Decimal("0.15"), Decimal("0.6"), "EUR").version.startswith("EUR-")


def test_recorded_costs_are_summed_not_repriced() -> None:
    prices = {"m": Price(Decimal("3"), Decimal("15"))}  # today's: not what these rows were priced at
    then = Price(Decimal("0.15"), Decimal("0.6"))
    recorded = {**_row("ml", "m", 3, 5), "price_version": then.version, "cost_nano": then.nano_cost(3, 5)}
    free = {**_row("ml", "m", 7, 7), "price_version": "none", "cost_nano": 0}
    rows = usage_report.priced([recorded, free, _row("ml", "m", 1_000_000, 0)], prices)
    assert [(r["cost"], r["cost_source"]) for r in rows] == [
        ("0.00000345", "recorded"),
        (None, "recorded"),
        ("3", "repriced"),
    ]
    (team,) = usage_report.group(rows, "team")
    assert (team["cost"], team["cost_source"], team["price_version"]) == ("3.00000345", "mixed", None)
    (only,) = usage_report.group(rows[:2], "key")
    assert (only["cost"], only["cost_source"]) == ("0.00000345", "recorded")


def _price_samples(metrics: Metrics) -> dict[tuple[str, str, str], float]:
    (family,) = [m for m in metrics.registry.collect() if m.name == "sluicegate_model_price_per_token"]
    return {(s.labels["model"], s.labels["type"], s.labels["currency"]): s.value for s in family.samples}


def test_the_price_gauge_follows_the_model_table() -> None:
    metrics = Metrics()
    priced = ModelConfig(
        name="m", endpoints=("http://w:1",), price=Price(Decimal("0.15"), Decimal("0.6"), "EUR")
    )
    router = Router(ModelTable((priced, ModelConfig(name="free", endpoints=("http://w:1",)))), metrics)
    assert _price_samples(metrics) == {("m", "prompt", "EUR"): 0.15e-6, ("m", "completion", "EUR"): 0.6e-6}
    router.add_model(ModelConfig(name="m", endpoints=("http://w:1",), price=Price(Decimal(2), Decimal(4))))
    assert _price_samples(metrics) == {("m", "prompt", "USD"): 2e-6, ("m", "completion", "USD"): 4e-6}
    router.remove_model("m")
    assert _price_samples(metrics) == {}
