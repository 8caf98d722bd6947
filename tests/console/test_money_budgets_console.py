"""Money budgets in the console, in a real browser: a team's monthly budget set in its form as a
decimal (and a bad one refused naming the field), seen by the admin API, and the Usage page of the
team showing the budget's spent, remaining and forecast."""

from __future__ import annotations

import secrets

from playwright.sync_api import Page, expect

from tests.conftest import Gateway
from tests.console.conftest import UI, screenshot


def test_a_team_money_budget_is_set_in_the_console_and_shown_on_its_usage_page(
    signed_in: Page, console_gateway: Gateway
) -> None:
    page, gateway = signed_in, console_gateway
    team = "ui-" + secrets.token_hex(4)
    page.goto(f"{gateway.url}{UI}/teams")
    page.fill("#new-team input[name=name]", team)
    page.fill("#new-team input[name=monthly_cost]", "-1")
    page.locator("#new-team button[type=submit]").click()
    expect(page.locator(".error")).to_contain_text("'monthly_cost' must be an amount of money")
    page.fill("#new-team input[name=name]", team)
    page.fill("#new-team input[name=monthly_cost]", "12.50")
    page.locator("#new-team button[type=submit]").click()
    expect(page.locator("h1")).to_have_text(f"Team {team}")
    assert gateway.admin.call("GET", f"/admin/v1/teams/{team}")["limits"] == {"monthly_cost": "12.5"}
    key = gateway.new_key(team, daily_cost="0.75")
    page.goto(f"{gateway.url}{UI}/usage?team={team}")
    monthly = page.locator("#money-budgets tr[data-owner=team][data-period=monthly]")
    expect(monthly.locator("[data-field=remaining]")).to_have_text("12.5")
    expect(monthly.locator("[data-field=spent]")).to_have_text("0")
    expect(monthly.locator("[data-field=forecast]")).to_have_text("0")
    daily = page.locator("#money-budgets tr[data-owner=key][data-period=daily]")
    expect(daily).to_contain_text(key["id"])
    expect(daily.locator("[data-field=remaining]")).to_have_text("0.75")
    screenshot(page, "usage-money-budgets")
