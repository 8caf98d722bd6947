"""Issue 26's console items on limits and usage, in a real browser: a team's and a key's priority,
default deadline and per-model limits, set by the CLI and seen in the console, set in the console
and seen by the admin API; usage per key and per client API (OpenAI SDK and Anthropic SDK requests)."""

from __future__ import annotations

import csv
import io
import secrets

import anthropic
import pytest
from playwright.sync_api import Page, expect

from gateway.cli import main as sluicegate_cli
from tests.conftest import FAKE_MODEL, Gateway
from tests.console.conftest import UI, screenshot
from tests.console.test_console import _create_team
from tests.waiting import wait_until

MODEL_ROW = f"tr[data-model='{FAKE_MODEL}']"


def _model_input(page: Page, form: str, name: str) -> str:
    return f"{form} input[name='model_limits.{FAKE_MODEL}.{name}']"


def _sluicegate(monkeypatch: pytest.MonkeyPatch, gateway: Gateway, *argv: str) -> None:
    monkeypatch.setenv("SLUICEGATE_URL", gateway.url)
    monkeypatch.setenv("SLUICEGATE_ADMIN_TOKEN", gateway.admin_token)
    monkeypatch.delenv("SLUICEGATE_ADMIN_PORT", raising=False)
    assert sluicegate_cli(list(argv)) == 0


def test_a_team_the_cli_configured_shows_its_priority_and_model_limits(
    signed_in: Page, console_gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    page, gateway = signed_in, console_gateway
    team = "cli-" + secrets.token_hex(4)
    _sluicegate(
        monkeypatch, gateway, "teams", "create", team, "--priority", "7",
        "--model-limit", f"{FAKE_MODEL}:rpm=5,tpm=1000,tpm_counts=output",
    )  # fmt: skip
    page.goto(f"{gateway.url}{UI}/teams")
    row = page.locator(f"#teams tr[data-team='{team}']")
    expect(row.locator(".priority")).to_have_text("7")
    expect(row.locator(".model-limits")).to_have_text(f"{FAKE_MODEL}: rpm=5 tpm=1,000 tpm_counts=output")

    # The team's form holds the same values; changed there, the admin API sees the change.
    row.locator("a").first.click()
    form = "#edit-team"
    expect(page.locator(f"{form} input[name=priority]")).to_have_value("7")
    expect(page.locator(_model_input(page, form, "rpm"))).to_have_value("5")
    expect(page.locator(_model_input(page, form, "tpm"))).to_have_value("1000")
    expect(page.locator(f"{form} select[name='model_limits.{FAKE_MODEL}.tpm_counts']")).to_have_value(
        "output"
    )
    page.fill(f"{form} input[name=priority]", "8")
    page.fill(_model_input(page, form, "rpm"), "9")
    page.fill(_model_input(page, form, "tpm"), "")
    page.locator(f"{form} button[type=submit]").click()
    expect(page.locator(".notice")).to_have_text("Limits saved.")
    limits = gateway.admin.call("GET", f"/admin/v1/teams/{team}")["limits"]
    assert limits == {"priority": 8, "model_limits": {FAKE_MODEL: {"rpm": 9}}}
    screenshot(page, "team-model-limits")

    # A row left blank removes that model's limits; a bad value is refused with the form kept.
    page.fill(_model_input(page, form, "max_concurrency"), "two")
    page.locator(f"{form} button[type=submit]").click()
    expect(page.locator(".error")).to_contain_text(f"model_limits.{FAKE_MODEL}.max_concurrency")
    expect(page.locator(_model_input(page, form, "max_concurrency"))).to_have_value("two")
    page.fill(_model_input(page, form, "max_concurrency"), "")
    page.fill(_model_input(page, form, "rpm"), "")
    page.fill(f"{form} input[name=priority]", "10")
    page.locator(f"{form} button[type=submit]").click()
    expect(page.locator(".error")).to_contain_text("'priority' must be an integer from 1 to 9.")
    page.fill(f"{form} input[name=priority]", "")
    page.locator(f"{form} button[type=submit]").click()
    expect(page.locator(".notice")).to_have_text("Limits saved.")
    assert gateway.admin.call("GET", f"/admin/v1/teams/{team}")["limits"] == {}


def test_keys_priority_and_model_limits_both_ways(
    signed_in: Page, console_gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    page, gateway = signed_in, console_gateway
    # Made in the console with per-model limits: the admin API has them.
    team = "ui-" + secrets.token_hex(4)
    page.goto(f"{gateway.url}{UI}/teams")
    page.fill("#new-team input[name=name]", team)
    page.fill("#new-team input[name=priority]", "6")
    page.fill(_model_input(page, "#new-team", "tpm"), "2000")
    page.locator("#new-team button[type=submit]").click()
    expect(page.locator("h1")).to_have_text(f"Team {team}")
    limits = gateway.admin.call("GET", f"/admin/v1/teams/{team}")["limits"]
    assert limits == {"priority": 6, "model_limits": {FAKE_MODEL: {"tpm": 2000}}}

    key = gateway.new_key(team, name="cli key")
    _sluicegate(
        monkeypatch, gateway, "keys", "update", key["id"], "--priority", "3",
        "--model-limit", f"{FAKE_MODEL}:max_concurrency=2",
    )  # fmt: skip
    page.goto(f"{gateway.url}{UI}/teams/{team}/keys")
    expect(page.locator(f"#keys tr[data-key='{key['id']}'] .limits")).to_have_text(
        f"priority=3; {FAKE_MODEL}: max_concurrency=2"
    )
    page.goto(f"{gateway.url}{UI}/keys/{key['id']}")
    form = "#edit-key"
    expect(page.locator(f"{form} input[name=priority]")).to_have_value("3")
    expect(page.locator(f"{form} .hint")).to_contain_text("capped at its team's (6)")
    expect(page.locator(_model_input(page, form, "max_concurrency"))).to_have_value("2")
    page.fill(f"{form} input[name=priority]", "4")
    page.fill(_model_input(page, form, "rpm"), "30")
    page.locator(f"{form} button[type=submit]").click()
    expect(page.locator(".notice")).to_have_text("Key saved.")
    shown = gateway.admin.call("GET", f"/admin/v1/keys/{key['id']}")["limits"]
    assert shown == {"priority": 4, "model_limits": {FAKE_MODEL: {"rpm": 30, "max_concurrency": 2}}}

    # A model the gateway does not serve (a forged form) is refused, as the admin API refuses it.
    page.goto(f"{gateway.url}{UI}/keys/{key['id']}")
    page.evaluate(
        """() => { const input = document.createElement("input");
           input.name = "model_limits.no-such-model.rpm"; input.value = "5";
           document.querySelector("#edit-key").append(input); }"""
    )
    page.locator(f"{form} button[type=submit]").click()
    expect(page.locator(".error")).to_have_text("'model_limits' names a model this gateway does not serve.")
    assert gateway.admin.call("GET", f"/admin/v1/keys/{key['id']}")["limits"] == shown


def test_a_default_deadline_is_set_on_teams_and_keys_in_the_console(
    signed_in: Page, console_gateway: Gateway
) -> None:
    page, gateway = signed_in, console_gateway
    team = "ui-" + secrets.token_hex(4)
    page.goto(f"{gateway.url}{UI}/teams")
    page.fill("#new-team input[name=name]", team)
    page.fill("#new-team input[name=default_deadline_ms]", "30000")
    page.locator("#new-team button[type=submit]").click()
    expect(page.locator("h1")).to_have_text(f"Team {team}")
    assert gateway.admin.call("GET", f"/admin/v1/teams/{team}")["limits"] == {"default_deadline_ms": 30000}

    key = gateway.new_key(team, name="urgent key")
    page.goto(f"{gateway.url}{UI}/keys/{key['id']}")
    form = "#edit-key"
    page.fill(f"{form} input[name=default_deadline_ms]", "0")
    page.locator(f"{form} button[type=submit]").click()
    expect(page.locator(".error")).to_contain_text(
        "'default_deadline_ms' must be a whole number of milliseconds"
    )
    page.fill(f"{form} input[name=default_deadline_ms]", "2000")
    page.locator(f"{form} button[type=submit]").click()
    expect(page.locator(".notice")).to_have_text("Key saved.")
    assert gateway.admin.call("GET", f"/admin/v1/keys/{key['id']}")["limits"] == {"default_deadline_ms": 2000}


def test_usage_per_key_and_per_api(signed_in: Page, console_gateway: Gateway) -> None:
    page, gateway = signed_in, console_gateway
    team = _create_team(page, gateway)
    chat_key = gateway.new_key(team, name="chat key")
    messages_key = gateway.new_key(team, name="messages key")
    client = gateway.client(chat_key["key"])
    for _ in range(2):
        client.chat.completions.create(
            model=FAKE_MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
    with anthropic.Anthropic(base_url=gateway.url, api_key=messages_key["key"], max_retries=0) as claude:
        claude.messages.create(model=FAKE_MODEL, max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    wait_until(
        lambda: sum(row["requests"] for row in gateway.usage(team)) == 3, 10, "the three requests metered"
    )

    def requests_per_group(by: str) -> dict[str, str]:
        page.goto(f"{gateway.url}{UI}/usage?team={team}&by={by}")
        expect(page.locator("#usage-query select[name=by]")).to_have_value(by)
        rows = page.locator("#usage-table tbody tr")
        return {
            rows.nth(n).locator(".group").inner_text(): rows.nth(n).locator("td.num").first.inner_text()
            for n in range(rows.count())
        }

    assert requests_per_group("key") == {
        f"chat key ({chat_key['id']})": "2",
        f"messages key ({messages_key['id']})": "1",
    }
    assert requests_per_group("api") == {"chat": "2", "messages": "1"}
    # The admin API (and `sluicegate usage --group-by api`) groups the same way.
    by_api = gateway.admin.call("GET", "/admin/v1/usage", team=team, group_by="api")["data"]
    assert {row["api"]: row["requests"] for row in by_api} == {"chat": 2, "messages": 1}
    screenshot(page, "usage-per-api")
    reply = page.request.get(f"{gateway.url}{UI}/usage.csv?team={team}&by=key")
    table = list(csv.reader(io.StringIO(reply.text())))
    assert table[0][:3] == ["day", "key", "requests"]
    assert sorted((row[1], row[2]) for row in table[1:]) == sorted(
        [(chat_key["id"], "2"), (messages_key["id"], "1")]
    )
