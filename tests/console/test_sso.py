"""People sign in to the console through the company's IdP: a real OpenID provider (oidc-provider
on loopback, tests/identity/idp.py), its own login and consent pages driven in a real Chromium,
two gateway replicas sharing sessions through one Redis, and every way a sign-in can go wrong
ending on a clear page and an audit entry, never a session."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.conftest import Gateway, GatewayFactory
from tests.identity.conftest import USERS, console_replicas, oidc_settings
from tests.identity.idp import CONSOLE, Idp, _Browser

UI = "/admin/ui"


@dataclass
class Sso:
    idp: Idp
    one: Gateway
    two: Gateway
    red: str
    blue: str


@pytest.fixture(scope="module")
def sso(make_gateway_module: GatewayFactory) -> Iterator[Sso]:
    with console_replicas(make_gateway_module, oidc_cli_client_id="sluicegate-cli") as (idp, one, two):
        red, blue = one.new_team(), one.new_team()
        binding = one.admin.call(
            "POST", "/admin/v1/role-bindings", {"group": "red-leads", "role": "team-admin", "team": red}
        )
        yield Sso(idp, one, two, red, blue)
        one.admin.call("DELETE", f"/admin/v1/role-bindings/{binding['id']}")


def _offline_only(page: Page) -> None:
    # The provider's pages @import Google Fonts: nothing leaves loopback.
    page.route(
        "**/*",
        lambda route: (
            route.continue_() if route.request.url.startswith("http://127.0.0.1:") else route.abort()
        ),
    )


def _sign_in_with_idp(page: Page, gateway: Gateway, login: str) -> None:
    page.goto(f"{gateway.url}{UI}/")
    page.click("#sso")
    page.fill("input[name=login]", login)
    page.fill("input[name=password]", "any")
    page.click("button[type=submit]")
    page.click("button[type=submit]")  # the provider's consent page: Continue
    page.wait_for_url(f"{gateway.url}{UI}/**")


def test_a_person_signs_in_through_the_idp_and_the_session_holds_on_every_replica(
    context: BrowserContext, sso: Sso
) -> None:
    page = context.new_page()
    _offline_only(page)
    _sign_in_with_idp(page, sso.one, "alice")
    expect(page.locator("h1")).to_have_text("Teams")
    expect(page.locator("#who")).to_contain_text("alice@example.test (Alice Admin)")
    expect(page.locator("#who")).to_contain_text("platform-admin")
    expect(page.locator("nav")).to_contain_text("Roles")
    # The other replica knows the session: it lives in Redis, not in one process.
    page.goto(f"{sso.two.url}{UI}/roles")
    expect(page.locator("h1")).to_have_text("Roles")
    expect(page.locator("#bindings")).to_contain_text("red-leads")
    # Signing out on one replica ends it on the other at once.
    page.click(".signout button")
    page.goto(f"{sso.one.url}{UI}/teams")
    expect(page.locator("h1")).to_have_text("Sign in")
    entries = sso.one.admin.call("GET", "/admin/v1/audit", limit=50)["data"]
    actions = [(e["action"], (e["actor"] or {}).get("sub")) for e in entries]
    assert ("console.signed_in", "alice") in actions
    assert ("console.signed_out", "alice") in actions


def test_a_team_admin_sees_only_what_their_roles_allow(context: BrowserContext, sso: Sso) -> None:
    page = context.new_page()
    _offline_only(page)
    _sign_in_with_idp(page, sso.one, "bob")
    expect(page.locator("#who")).to_contain_text(f"team-admin of {sso.red}")
    rows = page.locator("#teams tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(sso.red)
    expect(page.locator("#new-team")).to_have_count(0)
    expect(page.locator("nav")).not_to_contain_text("Models")
    expect(page.locator("nav")).not_to_contain_text("Roles")
    # The server refuses what the page does not show.
    for path in ("/models", "/roles", f"/teams/{sso.blue}/keys"):
        response = page.goto(f"{sso.one.url}{UI}{path}")
        assert response is not None
        assert response.status == 403, path
        expect(page.locator("main")).to_contain_text("This needs the")
    # Their own team's keys: they make one.
    page.goto(f"{sso.one.url}{UI}/teams/{sso.red}/keys")
    page.fill("input[name=name]", "from-the-console")
    page.locator("form#new-key button[type=submit]").click()
    expect(page.locator("main")).to_contain_text("sk-sg-")
    made = sso.one.admin.call("GET", "/admin/v1/keys", team=sso.red)["data"]
    assert [k["created_by"]["sub"] for k in made if k["name"] == "from-the-console"] == ["bob"]


def test_a_person_with_no_role_is_told_so(context: BrowserContext, sso: Sso) -> None:
    page = context.new_page()
    _offline_only(page)
    _sign_in_with_idp(page, sso.one, "dave")
    expect(page.locator("h1")).to_have_text("You are signed in, with no role")
    response = page.goto(f"{sso.one.url}{UI}/teams")
    assert response is not None
    assert response.status == 403


def _get(browser: _Browser, url: str) -> tuple[int, dict[str, str], str]:
    return browser.get(url)


def _start(sso: Sso, browser: _Browser) -> str:
    """A sign-in started at the console, walked through the provider: the callback URL."""
    status, headers, _ = browser.get(f"{sso.one.url}{UI}/oidc/login")
    assert status == 303
    callback = sso.idp._walk(browser, headers["location"], "carol")
    assert callback.startswith(f"{sso.one.url}{UI}/oidc/callback?")
    return callback


def _failed_entries(sso: Sso) -> list[str]:
    entries = sso.one.admin.call("GET", "/admin/v1/audit", limit=200)["data"]
    return [e["changes"]["reason"][1] for e in entries if e["action"] == "console.signin_failed"]


def test_a_callback_is_used_once_and_only_by_the_browser_that_started_it(sso: Sso) -> None:
    browser = _Browser(sso.one.url)
    callback = _start(sso, browser)
    # Another browser (the link sent to a victim, a replay elsewhere): nobody is signed in.
    status, headers, page = _Browser(sso.one.url).get(callback)
    assert status == 400
    assert "started in another browser" in page
    assert "set-cookie" not in headers or "sg_console=" not in headers["set-cookie"]
    # That refusal used the flow up: the right browser's callback is now spent too.
    status, _, page = browser.get(callback)
    assert status == 400
    assert "expired or was already used" in page
    # A fresh sign-in, used once: signed in; used again: refused.
    callback = _start(sso, browser)
    status, headers, _ = browser.get(callback)
    assert status == 303
    assert "sg_console=" in headers["set-cookie"]
    status, _, page = browser.get(callback)
    assert status == 400
    assert "expired or was already used" in page
    assert {"started in another browser", "unknown or used state"} <= set(_failed_entries(sso))


@pytest.mark.parametrize(
    ("query", "says", "reason"),
    [
        ("", "not one the console made", "no valid state"),
        ("?state=made-up-state-made-up-state&code=x", "expired or was already used", "unknown or used state"),
    ],
)
def test_a_forged_callback_signs_nobody_in(sso: Sso, query: str, says: str, reason: str) -> None:
    status, headers, page = _Browser(sso.one.url).get(f"{sso.one.url}{UI}/oidc/callback{query}")
    assert status == 400
    assert says in page
    assert "sg_console=" not in headers.get("set-cookie", "")
    assert reason in _failed_entries(sso)


def test_an_idp_error_a_bad_code_and_another_issuer_each_end_on_a_clear_page(sso: Sso) -> None:
    cases = [
        (
            {"error": "access_denied"},
            "did not sign you in (access_denied)",
            "identity provider said access_denied",
        ),
        ({"error": "<script>"}, "did not sign you in (error)", "identity provider said error"),
        (
            {"code": "a-code-the-provider-never-gave"},
            "did not accept the sign-in",
            "token endpoint answered 400",
        ),
        (
            {"code": "x", "iss": "http://127.0.0.1:1"},
            "came back from another identity provider",
            "iss is another",
        ),
    ]
    for extra, says, reason in cases:
        browser = _Browser(sso.one.url)
        status, headers, _ = browser.get(f"{sso.one.url}{UI}/oidc/login")
        state = urllib.parse.parse_qs(urllib.parse.urlsplit(headers["location"]).query)["state"][0]
        query = urllib.parse.urlencode({"state": state, **extra})
        status, headers, page = browser.get(f"{sso.one.url}{UI}/oidc/callback?{query}")
        assert status == 400, (extra, page[:300])
        assert says in page, extra
        assert "<script>" not in page
        assert "sg_console=" not in headers.get("set-cookie", "")
        assert any(r.startswith(reason) for r in _failed_entries(sso)), reason


def test_an_idp_that_is_down_gives_a_clear_page(make_gateway: GatewayFactory, sso: Sso) -> None:
    down = Idp(USERS)  # never started: nothing listens on its port
    fields = {"oidc": oidc_settings(down), "oidc_client_id": CONSOLE[0], "oidc_client_secret": CONSOLE[1]}
    with make_gateway(**fields) as gw:
        status, _, page = _Browser(gw.url).get(f"{gw.url}{UI}/oidc/login")
        assert status == 503
        assert "cannot be reached" in page
        assert "127.0.0.1" not in re.sub(r"<[^>]+>", "", page.split("<main>")[1])


def test_the_public_oidc_route_names_the_issuer_and_the_cli_client(sso: Sso) -> None:
    with urllib.request.urlopen(f"{sso.one.url}/admin/v1/oidc", timeout=10) as response:  # noqa: S310
        told = json.loads(response.read())
    assert told == {
        "issuer": sso.idp.issuer,
        "cli_client_id": "sluicegate-cli",
        "audience": oidc_settings(sso.idp).audience,
    }
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{sso.one.url}/admin/v1/me", timeout=10)  # noqa: S310
    refused.value.close()
    assert refused.value.code == 401


def test_starting_sign_ins_is_bounded_per_address(sso: Sso) -> None:
    """Each start writes a flow to Redis before anyone is known: one address cannot start more
    than 20 a minute (the module's earlier tests started a few from this address already)."""
    answers = [_Browser(sso.two.url).get(f"{sso.two.url}{UI}/oidc/login")[0] for _ in range(21)]
    assert answers.count(429) >= 1
    assert answers[0] == 303
    assert set(answers) == {303, 429}
    assert answers.index(429) == answers.count(303)  # once refused, refused for the rest of the minute


def test_the_flow_limiter_forgets_old_addresses_and_old_windows() -> None:
    from gateway.console.sso import FlowLimiter

    now = [0.0]
    limiter = FlowLimiter(2, max_addresses=3, clock=lambda: now[0])
    assert [limiter.allow("a") for _ in range(3)] == [True, True, False]
    now[0] = 60.0
    assert limiter.allow("a")
    for address in ("b", "c", "d", "e"):
        limiter.allow(address)
    assert len(limiter) == 3
