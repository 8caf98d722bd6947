"""A console form says every invalid field of a sending at once, not the first only (issue 37),
and stores nothing; a sending with one mistake says that one."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.conftest import FAKE_MODEL, Gateway
from tests.console.conftest import UI, screenshot
from tests.console.test_console import _create_team


def test_the_new_key_form_reports_every_invalid_field(signed_in: Page, console_gateway: Gateway) -> None:
    page, gw = signed_in, console_gateway
    team = _create_team(page, gw)
    page.goto(f"{gw.url}{UI}/teams/{team}/keys")
    form = page.locator("#new-key")
    form.locator("input[name=rpm]").fill("lots")
    form.locator("input[name=tpm]").fill("0")
    form.locator("input[name=priority]").fill("12")
    form.locator(f"input[name='model_limits.{FAKE_MODEL}.max_concurrency']").fill("two")
    form.locator("button[type=submit]").click()
    lines = page.locator(".error").inner_text().splitlines()
    assert lines == [
        "'rpm' must be a whole number.",
        "'tpm' must be an integer from 1 to 2^53.",
        "'priority' must be an integer from 1 to 9.",
        f"'model_limits.{FAKE_MODEL}.max_concurrency' must be a whole number.",
    ], lines
    screenshot(page, "key-form-errors")
    # Nothing was created; every value is there to be corrected.
    assert gw.admin.call("GET", "/admin/v1/keys", team=team)["data"] == []
    expect(form.locator("input[name=rpm]")).to_have_value("lots")
    expect(form.locator(f"input[name='model_limits.{FAKE_MODEL}.max_concurrency']")).to_have_value("two")


def test_the_team_form_reports_every_invalid_field(signed_in: Page, console_gateway: Gateway) -> None:
    page, gw = signed_in, console_gateway
    team = _create_team(page, gw)
    page.goto(f"{gw.url}{UI}/teams/{team}")
    form = page.locator("#edit-team")
    form.locator("input[name=weight]").fill("lots")
    form.locator("input[name=daily_tokens]").fill("-5")
    form.locator("button[type=submit]").click()
    assert page.locator(".error").inner_text().splitlines() == [
        "'daily_tokens' must be a whole number.",
        "'weight' must be a whole number.",
    ]
