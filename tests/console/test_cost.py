"""Cost per team, end to end: a gateway whose model table prices two models (a third unpriced), real
requests through the OpenAI SDK, and the cost that the console (a real Chromium), the admin API and
the CLI (table, CSV, JSON) show equals the tokens the SDK was told times the configured prices, in
exact decimals."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from decimal import Decimal

import pytest
from playwright.sync_api import Page, expect

from gateway.model_table import ModelConfig, ModelTable
from gateway.pricing import Price
from tests.conftest import FAKE_MODEL, OTHER_MODEL, Gateway, GatewayFactory
from tests.console.conftest import UI, screenshot
from tests.waiting import wait_until

# Prices whose products a float would not keep: 0.1 x 3 is 0.30000000000000004 in binary.
FAKE_PRICE = Price(Decimal("0.15"), Decimal("0.6"))
OTHER_PRICE = Price(Decimal("0.1"), Decimal("0.3"))
UNPRICED = "unpriced-model"


@pytest.fixture(scope="module")
def console_gateway(make_gateway_module: GatewayFactory, fake_worker: str) -> Iterator[Gateway]:
    """Replaces the package's console gateway for this module: one with prices."""
    table = ModelTable(
        (
            ModelConfig(name=FAKE_MODEL, endpoints=(fake_worker,), price=FAKE_PRICE),
            ModelConfig(name=OTHER_MODEL, endpoints=(fake_worker,), price=OTHER_PRICE),
            ModelConfig(name=UNPRICED, upstream_model=FAKE_MODEL, endpoints=(fake_worker,)),
        )
    )
    with make_gateway_module(table) as gateway:
        yield gateway


def _spend(gateway: Gateway, team: str) -> dict[str, tuple[int, int]]:
    """Requests to each model; the prompt and completion tokens the SDK was told, per model."""
    key = gateway.new_key(team)
    client = gateway.client(key["key"])
    told: dict[str, tuple[int, int]] = {}
    for model, prompts in (
        (FAKE_MODEL, ("one", "two three four")),
        (OTHER_MODEL, ("five",)),
        (UNPRICED, ("x",)),
    ):
        for prompt in prompts:
            completion = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": prompt}], max_tokens=7
            )
            assert completion.usage is not None
            before = told.get(model, (0, 0))
            told[model] = (
                before[0] + completion.usage.prompt_tokens,
                before[1] + completion.usage.completion_tokens,
            )
    expected_requests = 4
    wait_until(
        lambda: sum(r["requests"] for r in gateway.usage(team)) == expected_requests,
        10,
        "the requests' usage recorded",
    )
    return told


def _expected(told: dict[str, tuple[int, int]]) -> dict[str, Decimal]:
    """Per model: the tokens the SDK was told times the configured price, by hand."""
    prices = {FAKE_MODEL: FAKE_PRICE, OTHER_MODEL: OTHER_PRICE}
    return {
        model: (prompt * prices[model].input_per_million + completion * prices[model].output_per_million)
        / Decimal(1_000_000)
        for model, (prompt, completion) in told.items()
        if model in prices
    }


def _cli(gateway: Gateway, *args: str) -> str:
    env = {**os.environ, "SLUICEGATE_URL": gateway.url, "SLUICEGATE_ADMIN_TOKEN": gateway.admin_token}
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "usage", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_console_api_and_cli_show_the_tokens_times_the_price(
    signed_in: Page, console_gateway: Gateway
) -> None:
    team = console_gateway.new_team()
    told = _spend(console_gateway, team)
    expected = _expected(told)
    total = expected[FAKE_MODEL] + expected[OTHER_MODEL]
    assert all(tokens > (0, 0) for tokens in told.values())

    # The admin API: a cost per row and in the totals, exact decimal strings.
    result = console_gateway.admin.call("GET", "/admin/v1/usage", team=team, group_by="model")
    by_model = {r["model"]: r for r in result["data"]}
    for model, cost in expected.items():
        assert Decimal(by_model[model]["cost"]) == cost
        assert by_model[model]["currency"] == "USD"
    assert by_model[UNPRICED]["cost"] is None
    assert Decimal(result["totals"]["cost"]) == total
    assert isinstance(result["totals"]["cost"], str)

    # The CLI: JSON rows, CSV rows and the table's TOTAL row.
    rows = json.loads(_cli(console_gateway, "--team", team, "--group-by", "model", "--json"))
    assert {r["model"]: r["cost"] and Decimal(r["cost"]) for r in rows} == {**expected, UNPRICED: None}
    csv_rows = list(csv.DictReader(io.StringIO(_cli(console_gateway, "--team", team, "--csv"))))
    assert sum(Decimal(r["cost"]) for r in csv_rows if r["cost"]) == total
    assert {r["currency"] for r in csv_rows if r["model"] != UNPRICED} == {"USD"}
    table = _cli(console_gateway, "--team", team).splitlines()
    header = table[0].split()
    total_row = table[-1].split()
    assert total_row[0] == "TOTAL"
    assert Decimal(total_row[header.index("cost")]) == total

    # The console: the totals, each row, and the chart drawn from the same decimals.
    page = signed_in
    page.goto(f"{console_gateway.url}{UI}/usage?team={team}&by=model&metric=cost")
    expect(page.locator("#usage-totals dd[data-counter=cost]")).to_have_text(str(total.normalize()))
    expect(page.locator("#usage-totals")).to_contain_text("cost (USD)")
    shown = {
        row.locator("td").nth(1).inner_text(): row.locator("td[data-cost]").inner_text()
        for row in page.locator("#usage-table tbody tr").all()
    }
    assert {model: Decimal(cost) for model, cost in shown.items() if model != UNPRICED} == expected
    assert shown[UNPRICED] == "-"
    expect(page.locator("#usage-chart[data-chart-ready=true]")).to_have_count(1)
    drawn = page.evaluate(
        "() => Chart.getChart('usage-chart').data.datasets"
        ".map(d => [d.label, d.data.reduce((a, b) => a + b, 0)])"
    )
    assert dict(drawn) == {**{m: float(c) for m, c in expected.items()}, UNPRICED: 0}
    screenshot(page, "usage-cost")
    text = page.request.get(f"{console_gateway.url}{UI}/usage.csv?team={team}&by=model").text()
    console_csv = {r["model"]: r["cost"] for r in csv.DictReader(io.StringIO(text))}
    assert {m: Decimal(c) for m, c in console_csv.items() if c} == expected
    assert console_csv[UNPRICED] == ""


def test_the_price_gauge_is_exported_for_the_dashboard(console_gateway: Gateway) -> None:
    with urllib.request.urlopen(f"{console_gateway.url}/metrics", timeout=5) as resp:  # noqa: S310 -- loopback
        text = resp.read().decode()
    lines = [line for line in text.splitlines() if line.startswith("sluicegate_model_price_per_token{")]
    family = "sluicegate_model_price_per_token"
    assert sorted(lines) == sorted(
        [
            f'{family}{{currency="USD",model="{FAKE_MODEL}",type="completion"}} 6e-07',
            f'{family}{{currency="USD",model="{FAKE_MODEL}",type="prompt"}} 1.5e-07',
            f'{family}{{currency="USD",model="{OTHER_MODEL}",type="completion"}} 3e-07',
            f'{family}{{currency="USD",model="{OTHER_MODEL}",type="prompt"}} 1e-07',
        ]
    )
