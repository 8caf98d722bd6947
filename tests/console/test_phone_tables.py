"""The console's tables at a phone's width, 390 px, in Chromium (issue 37): a key's Rotate and
Revoke are on screen without scrolling (the keys table stacks, each cell labelled), and every table
that still scrolls sideways says so above it, while one that fits says nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Locator, Page, expect

from tests.conftest import Gateway
from tests.console.conftest import UI, screenshot, sign_in
from tests.console.test_console import _create_key, _create_team
from tests.console.test_phone_and_snippets import PHONE


@pytest.fixture
def phone(browser: Browser, console_gateway: Gateway) -> Iterator[Page]:
    context: BrowserContext = browser.new_context(viewport=PHONE)
    context.set_default_timeout(20_000)
    page = context.new_page()
    sign_in(page, console_gateway)
    expect(page.locator("h1")).to_have_text("Teams")
    yield page
    context.close()


def _on_screen(element: Locator) -> bool:
    """Within the viewport's width as laid out, before anything is scrolled."""
    box = element.bounding_box()
    assert box is not None
    return bool(box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"])


def _hints(page: Page) -> list[tuple[bool, bool]]:
    """(the box overflows, its hint is shown) for every scrolling box of the page."""
    pairs: list[tuple[bool, bool]] = page.evaluate(
        """() => [...document.querySelectorAll('.scroll')].map(box => {
            const hint = box.previousElementSibling;
            const shown = !!hint && hint.classList.contains('scroll-hint') && !hint.hidden
                && hint.getBoundingClientRect().height > 0;
            return [box.scrollWidth > box.clientWidth + 1, shown];
        })"""
    )
    return pairs


def test_row_actions_are_on_screen_and_wide_tables_say_they_scroll(
    phone: Page, console_gateway: Gateway
) -> None:
    gw = console_gateway
    team = _create_team(phone, gw)
    key_id, secret = _create_key(phone, gw, team, "phone key")
    gw.secrets_created.append(secret)
    phone.goto(f"{gw.url}{UI}/teams/{team}/keys")
    row = phone.locator(f"tr[data-key='{key_id}']")
    for button in ("Rotate", "Revoke"):
        assert _on_screen(row.get_by_role("button", name=button)), button
    # Stacked: each cell says its column.
    assert row.locator("td.status").evaluate("td => getComputedStyle(td, '::before').content") == '"Status"'
    assert all(overflows == shown for overflows, shown in _hints(phone)), _hints(phone)
    screenshot(phone, "keys-390")

    # The per-model limits of the key's form stack too: every input is on screen.
    phone.goto(f"{gw.url}{UI}/keys/{key_id}")
    limits = phone.locator("fieldset.model-limits input")
    assert limits.count() > 0
    assert all(_on_screen(limits.nth(i)) for i in range(limits.count()))

    # Wide tables that scroll: the teams list, the usage table, the models' endpoints.
    seen_overflowing = False
    for path in ("/teams", "/models", f"/teams/{team}"):
        phone.goto(f"{gw.url}{UI}{path}")
        pairs = _hints(phone)
        assert all(overflows == shown for overflows, shown in pairs), (path, pairs)
        seen_overflowing = seen_overflowing or any(overflows for overflows, _ in pairs)
    assert seen_overflowing, "no table overflowed at 390 px: the hint was never checked"
    screenshot(phone, "teams-390")

    # Wide enough again: the hints go.
    phone.set_viewport_size({"width": 1600, "height": 900})
    phone.goto(f"{gw.url}{UI}/teams")
    assert not any(shown for _, shown in _hints(phone))
