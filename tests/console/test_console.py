"""The admin console in a real browser: sign in, teams, keys (a secret shown once, used through the
OpenAI SDK, then revoked), usage, models, audit; CSRF, CSP, escaping, and no-JavaScript forms."""

from __future__ import annotations

import datetime as dt
import re
import secrets
import urllib.request

import openai
import pytest
from playwright.sync_api import Browser, BrowserContext, Dialog, Page, expect

from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory
from tests.console.conftest import CHROMIUM_ARGS, UI, screenshot, sign_in
from tests.waiting import wait_until

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
)
XSS = "<img src=x onerror=alert(1)>"


def _create_team(page: Page, gateway: Gateway, **limits: str) -> str:
    name = "ui-" + secrets.token_hex(4)
    page.goto(f"{gateway.url}{UI}/teams")
    form = page.locator("#new-team")
    form.locator("input[name=name]").fill(name)
    for field, value in limits.items():
        form.locator(f"input[name={field}]").fill(value)
    form.locator("button[type=submit]").click()
    expect(page.locator("h1")).to_have_text(f"Team {name}")
    return name


def _create_key(page: Page, gateway: Gateway, team: str, name: str) -> tuple[str, str]:
    """Returns the key's id and its secret, read from the page that shows it once."""
    page.goto(f"{gateway.url}{UI}/teams/{team}/keys")
    form = page.locator("#new-key")
    form.locator("input[name=name]").fill(name)
    form.locator(f"input[name=models][value='{FAKE_MODEL}']").check()
    form.locator("button[type=submit]").click()
    secret_box = page.locator("#secret-value")
    expect(secret_box).to_be_visible()
    key_id = page.locator("#new-secret code").inner_text()
    return key_id, secret_box.input_value()


def test_sign_in_sets_a_strict_cookie_and_the_csp(context: BrowserContext, console_gateway: Gateway) -> None:
    page = context.new_page()
    response = page.goto(f"{console_gateway.url}{UI}/teams")
    assert response is not None
    assert page.url.endswith(f"{UI}/login?next=/admin/ui/teams")
    headers = response.headers
    assert headers["content-security-policy"] == CSP
    assert headers["x-frame-options"] == "DENY"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"
    assert headers["cache-control"] == "no-store"
    screenshot(page, "login")
    page.fill("input[name=token]", console_gateway.admin_token)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Teams")
    assert page.url.endswith(f"{UI}/teams")
    (cookie,) = [c for c in context.cookies() if c["name"] == "sg_console"]
    assert cookie["httpOnly"]
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == UI
    assert console_gateway.admin_token not in cookie["value"]
    # Signing out ends the session: the cookie copied before no longer signs anyone in.
    page.click(".signout button")
    expect(page.locator("input[name=token]")).to_be_visible()
    context.add_cookies(
        [{"name": cookie["name"], "value": cookie["value"], "domain": cookie["domain"], "path": UI}]
    )
    page.goto(f"{console_gateway.url}{UI}/teams")
    expect(page.locator("input[name=token]")).to_be_visible()


def test_a_wrong_token_cannot_sign_in_and_repeated_ones_are_throttled(
    browser: Browser, make_gateway: GatewayFactory
) -> None:
    with make_gateway(admin_max_failures=3) as gateway:
        context = browser.new_context()
        try:
            page = context.new_page()
            sign_in(page, gateway, "x" * 40)
            expect(page.locator(".error")).to_have_text("That is not the admin token.")
            assert not [c for c in context.cookies() if c["name"] == "sg_console"]
            for _ in range(2):
                sign_in(page, gateway, "y" * 40)
                expect(page.locator(".error")).to_be_visible()
            # Throttled: a wrong token now says when to try again, as the admin API does ...
            sign_in(page, gateway, "z" * 40)
            expect(page.locator(".error")).to_contain_text("Too many wrong admin tokens")
            assert not [c for c in context.cookies() if c["name"] == "sg_console"]
            request = urllib.request.Request(  # noqa: S310
                f"{gateway.url}/admin/v1/teams", headers={"authorization": "Bearer " + "z" * 40}
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)  # noqa: S310
            refused.value.close()
            assert refused.value.code == 429
            # ... and the right token still signs in: guesses cannot lock the admin out.
            sign_in(page, gateway)
            expect(page.locator("input[name=token]")).to_have_count(0)
            assert [c for c in context.cookies() if c["name"] == "sg_console"]
        finally:
            context.close()


def test_create_and_edit_a_team(signed_in: Page, console_gateway: Gateway) -> None:
    page = signed_in
    name = _create_team(page, console_gateway, rpm="120", weight="3")
    expect(page.locator(".notice")).to_have_text("Team created.")
    form = page.locator("#edit-team")
    expect(form.locator("input[name=rpm]")).to_have_value("120")
    form.locator("input[name=monthly_tokens]").fill("5000000")
    form.locator("input[name=rpm]").fill("")
    form.locator("button[type=submit]").click()
    expect(page.locator(".notice")).to_have_text("Limits saved.")
    screenshot(page, "team")
    limits = console_gateway.admin.call("GET", f"/admin/v1/teams/{name}")["limits"]
    assert limits == {"monthly_tokens": 5_000_000, "weight": 3}
    # Bad input: the form again with the API's message, nothing changed.
    form = page.locator("#edit-team")
    form.locator("input[name=weight]").fill("lots")
    form.locator("button[type=submit]").click()
    expect(page.locator(".error")).to_have_text("'weight' must be a whole number.")
    page.goto(f"{console_gateway.url}{UI}/teams")
    row = page.locator(f"tr[data-team='{name}']")
    expect(row).to_contain_text("5,000,000")
    screenshot(page, "teams")


def test_a_key_secret_is_shown_once_works_in_the_sdk_and_stops_when_revoked(
    signed_in: Page, console_gateway: Gateway
) -> None:
    page = signed_in
    team = _create_team(page, console_gateway)
    key_id, secret = _create_key(page, console_gateway, team, "ci key")
    console_gateway.secrets_created.append(secret)
    screenshot(page, "key-created")
    page.reload()
    expect(page.locator(f"tr[data-key='{key_id}'] .status")).to_have_text("active")
    expect(page.locator("#secret-value")).to_have_count(0)
    assert secret not in page.content()

    client = console_gateway.client(secret)
    completion = client.chat.completions.create(
        model=FAKE_MODEL, messages=[{"role": "user", "content": "count my tokens"}], max_tokens=8
    )
    assert completion.usage is not None
    spent = completion.usage.total_tokens
    wait_until(lambda: console_gateway.usage(team), 10, "the request's usage recorded")

    page.goto(f"{console_gateway.url}{UI}/usage?team={team}&by=model")
    expect(page.locator("#usage-totals dd[data-counter=total_tokens]")).to_have_text(f"{spent:,}")
    expect(page.locator("#usage-totals dd[data-counter=requests]")).to_have_text("1")
    expect(page.locator("#usage-chart[data-chart-ready=true]")).to_have_count(1)
    drawn = page.evaluate(
        "() => Chart.getChart('usage-chart').data.datasets"
        ".map(d => [d.label, d.data.reduce((a, b) => a + b, 0)])"
    )
    assert drawn == [[FAKE_MODEL, spent]]
    screenshot(page, "usage")
    csv_text = page.request.get(f"{console_gateway.url}{UI}/usage.csv?team={team}&by=model").text()
    header, *lines = csv_text.strip().splitlines()
    assert header.split(",")[:3] == ["day", "model", "requests"]
    assert len(lines) == 1
    assert lines[0].split(",")[1:3] == [FAKE_MODEL, "1"]

    page.goto(f"{console_gateway.url}{UI}/teams/{team}/keys")
    page.locator(f"tr[data-key='{key_id}'] button.danger").click()
    expect(page.locator(".notice")).to_have_text("Key revoked.")
    expect(page.locator(f"tr[data-key='{key_id}'] .status")).to_have_text("revoked")
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model=FAKE_MODEL, messages=[{"role": "user", "content": "hi"}])


def test_typed_text_renders_as_text(signed_in: Page, console_gateway: Gateway) -> None:
    page = signed_in
    dialogs: list[str] = []

    def on_dialog(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    team = _create_team(page, console_gateway)
    _, secret = _create_key(page, console_gateway, team, XSS)
    console_gateway.secrets_created.append(secret)
    cell = page.locator("#keys .key-name")
    expect(cell).to_have_text(XSS)
    assert page.locator("#keys img").count() == 0
    # The audit page shows the name too (in the key's creation entry), as text.
    page.goto(f"{console_gateway.url}{UI}/audit?team={team}")
    expect(page.locator("#audit")).to_contain_text("key.created")
    assert page.locator("#audit img").count() == 0
    screenshot(page, "audit")
    assert dialogs == []


def test_a_post_without_the_csrf_token_is_refused(signed_in: Page, console_gateway: Gateway) -> None:
    name = "csrf-" + secrets.token_hex(4)
    form = {"name": name}
    # The browser's own cookie, the form without its token, then with a wrong one.
    for extra in ({}, {"csrf": "forged"}):
        response = signed_in.request.post(f"{console_gateway.url}{UI}/teams", form={**form, **extra})
        assert response.status == 403
        assert response.headers["content-security-policy"] == CSP
    teams = console_gateway.admin.call("GET", "/admin/v1/teams")["data"]
    assert name not in [t["name"] for t in teams]


def test_teams_work_without_javascript(browser: Browser, console_gateway: Gateway) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        sign_in(page, console_gateway)
        expect(page.locator("h1")).to_have_text("Teams")
        name = _create_team(page, console_gateway, tpm="9000")
        page.goto(f"{console_gateway.url}{UI}/teams")
        expect(page.locator(f"tr[data-team='{name}']")).to_contain_text("9,000")
        # A bad name: the form again with a clear message, never a 500.
        page.locator("#new-team input[name=name]").fill("Not A Name")
        page.locator("#new-team button[type=submit]").click()
        expect(page.locator(".error")).to_contain_text("'name' must be 1-63 characters")
        screenshot(page, "teams-no-js")
    finally:
        context.close()


def test_models_page_shows_endpoints_and_polls(signed_in: Page, console_gateway: Gateway) -> None:
    page = signed_in
    page.goto(f"{console_gateway.url}{UI}/models")
    expect(page.locator("#models")).to_contain_text(FAKE_MODEL)
    expect(page.locator("#models .state-healthy").first).to_be_visible()
    with page.expect_response(re.compile(r"/admin/ui/models/fragment$")) as polled:
        pass
    assert polled.value.status == 200
    expect(page.locator("#models")).to_contain_text(FAKE_MODEL)
    screenshot(page, "models")


def test_edit_rotate_then_delete_a_team_revokes_its_keys(signed_in: Page, console_gateway: Gateway) -> None:
    page = signed_in
    team = _create_team(page, console_gateway)
    key_id, secret = _create_key(page, console_gateway, team, "doomed")
    console_gateway.secrets_created.append(secret)
    # Edit the key, then rotate it: the new secret is shown once and works.
    page.locator(f"#keys tr[data-key='{key_id}'] a").click()
    page.locator("#edit-key input[name=rpm]").fill("50")
    next_year = dt.datetime.now(dt.UTC).year + 1
    page.locator("#edit-key input[name=expires_at]").fill(f"{next_year}-01-31T12:00")
    page.locator("#edit-key input[name=models][value='other-model']").check()
    page.locator("#edit-key button[type=submit]").click()
    expect(page.locator(".notice")).to_have_text("Key saved.")
    record = console_gateway.admin.call("GET", f"/admin/v1/keys/{key_id}")
    assert record["limits"]["rpm"] == 50
    assert record["models"] == [FAKE_MODEL, "other-model"]
    assert record["expires_at"] == dt.datetime(next_year, 1, 31, 12, tzinfo=dt.UTC).timestamp()
    page.goto(f"{console_gateway.url}{UI}/teams/{team}/keys")
    page.locator(f"tr[data-key='{key_id}'] form.inline button:text('Rotate')").click()
    expect(page.locator("#secret-value")).to_be_visible()
    rotated = page.locator("#secret-value").input_value()
    console_gateway.secrets_created.append(rotated)
    assert rotated != secret
    console_gateway.client(rotated).chat.completions.create(
        model=FAKE_MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )
    page.goto(f"{console_gateway.url}{UI}/teams/{team}")
    page.locator("#delete-team button").click()
    expect(page.locator(".error")).to_contain_text("Type the team's name")
    page.locator("#delete-team input[name=confirm]").fill(team)
    page.locator("#delete-team button").click()
    expect(page.locator(".notice")).to_have_text("Team deleted; its keys are revoked.")
    with pytest.raises(openai.AuthenticationError):
        console_gateway.client(rotated).chat.completions.create(
            model=FAKE_MODEL, messages=[{"role": "user", "content": "hi"}]
        )


def test_without_an_admin_token_the_console_says_so(browser: Browser, make_gateway: GatewayFactory) -> None:
    assert "--headless" in CHROMIUM_ARGS
    with make_gateway(admin_token=None) as gateway:
        context = browser.new_context()
        try:
            page = context.new_page()
            response = page.goto(f"{gateway.url}{UI}/")
            assert response is not None
            assert response.status == 403
            expect(page.locator("h1")).to_have_text("The console is disabled")
        finally:
            context.close()
