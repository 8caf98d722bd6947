"""The console items of issue 26 in a real browser: a phone's width (no page-wide overflow, the
sign-out button on the dark bar), the new-key snippets, keys' last use, dates in the audit log
and the favicon."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, ViewportSize, expect

from tests.conftest import FAKE_MODEL, Gateway
from tests.console.conftest import UI, screenshot, sign_in
from tests.console.test_console import _create_key, _create_team
from tests.waiting import wait_until

PHONE: ViewportSize = {"width": 390, "height": 844}
DESKTOP: ViewportSize = {"width": 1280, "height": 900}


def _page(context: BrowserContext, gateway: Gateway) -> Page:
    page = context.new_page()
    sign_in(page, gateway)
    expect(page.locator("h1")).to_have_text("Teams")
    return page


def _no_page_overflow(page: Page) -> None:
    """Nothing makes the page wider than the screen: a wide table scrolls inside itself."""
    wider = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert wider <= 0, f"{page.url} is {wider}px wider than the screen"


def _signout_on_the_bar(page: Page) -> None:
    bar = page.locator("header.top").bounding_box()
    button = page.locator("form.signout button").bounding_box()
    assert bar is not None
    assert button is not None
    assert bar["x"] <= button["x"]
    assert button["x"] + button["width"] <= bar["x"] + bar["width"]
    assert bar["y"] <= button["y"]
    assert button["y"] + button["height"] <= bar["y"] + bar["height"]


def _walk(context: BrowserContext, gateway: Gateway, width: str) -> None:
    page = _page(context, gateway)
    team = _create_team(page, gateway)
    key_id, secret = _create_key(page, gateway, team, "phone key")
    gateway.secrets_created.append(secret)

    # The new-key panel: the client base URL and snippets with the secret, ready to paste.
    expect(page.locator("#client-base")).to_have_text(f"{gateway.url}/v1")
    snippets = page.locator("#snippets").inner_text()
    assert f'OpenAI(base_url="{gateway.url}/v1", api_key="{secret}")' in snippets
    assert f"ANTHROPIC_BASE_URL={gateway.url} ANTHROPIC_AUTH_TOKEN={secret}" in snippets
    assert 'wire_api = "responses"' in snippets
    _no_page_overflow(page)
    _signout_on_the_bar(page)
    screenshot(page, f"key-created-{width}")

    # Last used: never, then the day of the request.
    page.goto(f"{gateway.url}{UI}/teams/{team}/keys")
    expect(page.locator(f"tr[data-key='{key_id}'] .last-used")).to_have_text("never")
    gateway.client(secret).chat.completions.create(
        model=FAKE_MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )
    wait_until(lambda: gateway.usage(team), 10, "the request's usage recorded")
    page.reload()
    expect(page.locator(f"tr[data-key='{key_id}'] .last-used")).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d "))
    _no_page_overflow(page)

    # The audit log shows a revocation's time as a date, never epoch seconds.
    page.locator(f"tr[data-key='{key_id}'] button.danger").click()
    expect(page.locator(".notice")).to_have_text("Key revoked.")
    page.goto(f"{gateway.url}{UI}/audit?team={team}")
    changes = page.locator("#audit").inner_text()
    assert re.search(r"revoked_at: never → \d{4}-\d\d-\d\d \d\d:\d\d UTC", changes), changes
    assert not re.search(r"\d{10}\.\d", changes), changes
    for path in ("/teams", "/usage", "/models", "/audit"):
        page.goto(f"{gateway.url}{UI}{path}")
        _no_page_overflow(page)
        _signout_on_the_bar(page)
    screenshot(page, f"audit-{width}")


@pytest.fixture(params=["desktop", "phone"])
def sized(request: pytest.FixtureRequest, browser: Browser) -> Iterator[tuple[BrowserContext, str]]:
    context = browser.new_context(viewport=PHONE if request.param == "phone" else DESKTOP)
    context.set_default_timeout(20_000)
    yield context, request.param
    context.close()


def test_console_items_at_desktop_and_phone_widths(
    sized: tuple[BrowserContext, str], console_gateway: Gateway
) -> None:
    context, width = sized
    _walk(context, console_gateway, width)


def test_the_console_has_a_favicon(signed_in: Page, console_gateway: Gateway) -> None:
    href = signed_in.locator("link[rel=icon]").get_attribute("href")
    assert href == f"{UI}/static/favicon.svg"
    reply = signed_in.request.get(f"{console_gateway.url}{href}")
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("image/svg+xml")
