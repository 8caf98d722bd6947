"""A real headless Chromium (Debian's, driven by Playwright for Python) against a real gateway:
uvicorn on a loopback socket, the session's redis-server, the fake worker.

One browser for the session; each test its own browser context (cookies, JavaScript on or off).
Chromium is the system's (`tools/get-chromium.sh`): `playwright install` is never run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, expect, sync_playwright

from tests.conftest import Gateway, GatewayFactory

CHROMIUM = os.environ.get("SLUICEGATE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-output" / "console"
# axe-core, pinned by tests/console/axe/package-lock.json, installed by tools/get-axe.sh (`make test`).
AXE = ROOT / ".cache" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
# What axe checks: WCAG 2.0, 2.1 and 2.2 at levels A and AA (contrast, labels, names, reflow's
# scrollable regions, ...) and Deque's best practices (landmarks, headings).
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]
UI = "/admin/ui"


# Package scope, not session: Playwright's sync API keeps an event loop running in the main
# thread while it is open, and every later test that calls asyncio.run() would fail.
@pytest.fixture(scope="package")
def playwright_driver() -> Iterator[Playwright]:
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run tools/get-chromium.sh (apt-get install -y chromium)")
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="package")
def browser(playwright_driver: Playwright) -> Iterator[Browser]:
    browser = playwright_driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
    yield browser
    browser.close()


@pytest.fixture(scope="module")
def console_gateway(make_gateway_module: GatewayFactory) -> Iterator[Gateway]:
    with make_gateway_module() as gateway:
        yield gateway


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(20_000)
    yield context
    context.close()


def sign_in(page: Page, gateway: Gateway, token: str | None = None) -> None:
    page.goto(f"{gateway.url}{UI}/")
    expect(page.locator("input[name=token]")).to_be_visible()
    page.fill("input[name=token]", token or gateway.admin_token)
    page.click("button[type=submit]")


@pytest.fixture
def signed_in(context: BrowserContext, console_gateway: Gateway) -> Iterator[Page]:
    """A signed-in page; at the end, the browser must have reported no CSP violation and no
    script error (htmx and Chart.js included)."""
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    sign_in(page, console_gateway)
    expect(page.locator("h1")).to_have_text("Teams")
    yield page
    # "Failed to load resource" is the browser noting a 4xx the test asked for (a bad form, the
    # favicon): not a script error. CSP violations read "Refused to ...".
    assert [p for p in problems if not p.startswith("Failed to load resource")] == []


@pytest.fixture(scope="package")
def axe_source() -> str:
    if not AXE.is_file():
        pytest.fail(f"{AXE} is missing: run tools/get-axe.sh (make test does)")
    return AXE.read_text(encoding="utf-8")


# Each violation as one line: the rule, its impact and the elements it found.
_AXE_RUN = """async (tags) => {
  const options = {runOnly: {type: "tag", values: tags}, resultTypes: ["violations"]};
  const result = await window.axe.run(document, options);
  return result.violations.map(v => `${v.id} (${v.impact}): ${v.help}: ` +
    v.nodes.map(n => n.target.join(" ")).join(", "));
}"""


def axe_violations(page: Page, source: str) -> list[str]:
    """axe-core's violations on the page as it is now. The engine is evaluated through the
    DevTools protocol, which the console's CSP (no inline scripts) does not govern."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(source)
    violations: list[str] = page.evaluate(_AXE_RUN, AXE_TAGS)
    return violations


def screenshot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
