"""Every console page through axe-core (tools/get-axe.sh) in the real Chromium, at a desktop's and a
phone's width: no violation of WCAG 2.x A/AA or axe's best practices (contrast, labels, names,
landmarks, scrollable regions a keyboard can reach), and no page wider than the screen."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, ViewportSize, expect

from tests.conftest import FAKE_MODEL, Gateway
from tests.console.conftest import UI, axe_violations, sign_in
from tests.console.test_console import _create_key, _create_team
from tests.waiting import wait_until

PHONE: ViewportSize = {"width": 390, "height": 844}
DESKTOP: ViewportSize = {"width": 1280, "height": 900}


@pytest.fixture(params=["desktop", "phone"])
def sized(request: pytest.FixtureRequest, browser: Browser) -> Iterator[BrowserContext]:
    context = browser.new_context(viewport=PHONE if request.param == "phone" else DESKTOP)
    context.set_default_timeout(20_000)
    yield context
    context.close()


def _check(page: Page, source: str, found: dict[str, list[str]]) -> None:
    wider = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    problems = axe_violations(page, source)
    if wider > 0:
        problems.append(f"the page is {wider}px wider than the screen")
    path = page.url.split(UI, 1)[-1]
    if problems:
        found[path] = problems


def test_every_page_passes_axe_at_both_widths(
    sized: BrowserContext, console_gateway: Gateway, axe_source: str
) -> None:
    found: dict[str, list[str]] = {}
    page = sized.new_page()
    page.goto(f"{console_gateway.url}{UI}/login")
    _check(page, axe_source, found)
    # A failed sign-in: the error message on the form.
    page.fill("input[name=token]", "not-the-token")
    page.click("button[type=submit]")
    expect(page.locator(".error")).to_be_visible()
    _check(page, axe_source, found)

    sign_in(page, console_gateway)
    expect(page.locator("h1")).to_have_text("Teams")
    team = _create_team(page, console_gateway, rpm="60", priority="7")
    _check(page, axe_source, found)  # the team's page, with its notice
    key_id, secret = _create_key(page, console_gateway, team, "axe key")
    console_gateway.secrets_created.append(secret)
    _check(page, axe_source, found)  # the new secret and its snippets
    console_gateway.client(secret).chat.completions.create(
        model=FAKE_MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )
    wait_until(lambda: console_gateway.usage(team), 10, "the request's usage recorded")
    for path in (
        "/teams",
        f"/teams/{team}/keys?status=all",
        f"/teams/{team}/batches",
        f"/keys/{key_id}",
        "/usage",
        f"/usage?team={team}&by=key",
        "/usage?by=api&metric=requests",
        "/models",
        "/audit",
        "/no-such-page",
    ):
        page.goto(f"{console_gateway.url}{UI}{path}")
        _check(page, axe_source, found)
    # A form sent back with its error.
    page.goto(f"{console_gateway.url}{UI}/teams/{team}")
    page.locator("#edit-team input[name=rpm]").fill("lots")
    page.locator("#edit-team button[type=submit]").click()
    expect(page.locator(".error")).to_be_visible()
    _check(page, axe_source, found)
    report = "\n".join(f"{path}:\n  " + "\n  ".join(problems) for path, problems in found.items())
    assert found == {}, report
