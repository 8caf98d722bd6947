"""The console attacked: from another site's page, with odd cookies, paths, methods and dates, by a
second session, and through what a spreadsheet makes of the CSV. Plain HTTP against the real
gateway where no browser is needed; a real Chromium where the browser's own behaviour matters."""

from __future__ import annotations

import csv
import datetime as dt
import http.client
import http.server
import io
import re
import secrets
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis
from playwright.sync_api import Browser, Page, expect

from gateway.admin.throttle import LOCKOUT_S
from gateway.redis import keys as redis_keys
from tests.conftest import Gateway, GatewayFactory
from tests.console.conftest import UI, sign_in

_FORM = {"content-type": "application/x-www-form-urlencoded"}


@dataclass(frozen=True)
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: str


def _http(gateway: Gateway, method: str, path: str, body: bytes | None = None, **headers: str) -> Answer:
    """One request as sent, header bytes included (http.client encodes str headers as latin-1)."""
    url = urllib.parse.urlsplit(gateway.url)
    assert url.hostname is not None
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=20)
    try:
        connection.request(
            method, path, body=body, headers={k.replace("_", "-"): v for k, v in headers.items()}
        )
        response = connection.getresponse()
        return Answer(response.status, response.headers, response.read().decode("utf-8", "replace"))
    finally:
        connection.close()


@dataclass(frozen=True)
class Signed:
    cookie: str
    csrf: str


def _sign_in_http(gateway: Gateway) -> Signed:
    answer = _http(
        gateway,
        "POST",
        f"{UI}/login",
        urllib.parse.urlencode({"token": gateway.admin_token}).encode(),
        **_FORM,
    )
    assert answer.status == 303
    cookie = answer.headers["set-cookie"].split(";")[0]
    page = _http(gateway, "GET", f"{UI}/teams", cookie=cookie)
    found = re.search(r'name="csrf" value="([^"]+)"', page.body)
    assert found is not None
    return Signed(cookie, found.group(1))


def _assert_console_page(answer: Answer, status: int) -> None:
    """An HTML page with every header a console page has."""
    assert answer.status == status
    assert answer.headers["content-type"].startswith("text/html")
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
    assert answer.headers["x-frame-options"] == "DENY"
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["referrer-policy"] == "no-referrer"
    assert answer.headers["cache-control"] == "no-store"


@pytest.fixture
def other_site() -> Iterator[str]:
    """A page on another site (localhost, where the gateway is 127.0.0.1): what an attacker serves."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!doctype html><title>elsewhere</title><p>elsewhere</p>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_another_site_cannot_spend_the_sign_in_tries_and_lock_the_admin_out(
    browser: Browser, make_gateway: GatewayFactory, other_site: str
) -> None:
    with make_gateway(admin_max_failures=2) as gateway:
        context = browser.new_context()
        try:
            page = context.new_page()
            page.goto(other_site)
            # No CORS preflight for a form body: the browser sends these, cross-site, as the page asks.
            statuses = page.evaluate(
                """async (url) => {
                    const out = [];
                    for (let i = 0; i < 4; i++) {
                        const r = await fetch(url, {method: "POST", mode: "no-cors",
                                                    body: new URLSearchParams({token: "guess-" + i})});
                        out.push(r.type);
                    }
                    return out;
                }""",
                f"{gateway.url}{UI}/login",
            )
            assert statuses == ["opaque"] * 4
            sign_in(page, gateway)
            expect(page.locator("h1")).to_have_text("Teams")
            assert gateway.admin.call("GET", "/admin/v1/teams")["object"] == "list"
        finally:
            context.close()
        # The right token from another site signs nobody in either (and counts nothing).
        answer = _http(
            gateway,
            "POST",
            f"{UI}/login",
            urllib.parse.urlencode({"token": gateway.admin_token}).encode(),
            sec_fetch_site="cross-site",
            **_FORM,
        )
        _assert_console_page(answer, 403)
        assert "set-cookie" not in answer.headers


def test_a_post_from_another_site_is_refused_even_with_the_session_and_its_token(
    console_gateway: Gateway,
) -> None:
    signed = _sign_in_http(console_gateway)
    name = "xs-" + secrets.token_hex(4)
    body = urllib.parse.urlencode({"name": name, "csrf": signed.csrf}).encode()
    for site in ("cross-site", "same-site"):
        answer = _http(
            console_gateway, "POST", f"{UI}/teams", body, cookie=signed.cookie, sec_fetch_site=site, **_FORM
        )
        _assert_console_page(answer, 403)
    teams = console_gateway.admin.call("GET", "/admin/v1/teams")["data"]
    assert name not in [t["name"] for t in teams]
    # From the console's own page it works.
    answer = _http(
        console_gateway,
        "POST",
        f"{UI}/teams",
        body,
        cookie=signed.cookie,
        sec_fetch_site="same-origin",
        **_FORM,
    )
    assert answer.status == 303


def test_a_cookie_that_is_not_ascii_is_no_session_not_an_error(console_gateway: Gateway) -> None:
    # What a sibling subdomain could set for this host: the console must still sign in.
    for cookie in ("sg_console=v1.abc.99999999999.\xe9", "sg_console=v1.abc.\u00b2.sig"):
        login = _http(console_gateway, "GET", f"{UI}/login", cookie=cookie)
        _assert_console_page(login, 200)
        assert 'name="token"' in login.body
        teams = _http(console_gateway, "GET", f"{UI}/teams", cookie=cookie)
        assert teams.status == 303
        assert teams.headers["location"] == f"{UI}/login?next={UI}/teams"


def test_unknown_pages_and_methods_are_console_pages_with_its_headers(console_gateway: Gateway) -> None:
    signed = _sign_in_http(console_gateway)
    for path in (f"{UI}/nope", f"{UI}/teams/x/nope", f"{UI}/static/nope.css"):
        for cookie in ("", signed.cookie):
            answer = _http(console_gateway, "GET", path, cookie=cookie)
            _assert_console_page(answer, 404)
            assert "There is no such page in the console." in answer.body
            assert "/admin/v1" not in answer.body  # not the API's list of routes
    for method, path, allowed in (
        ("GET", f"{UI}/logout", {"POST"}),
        ("PUT", f"{UI}/teams", {"GET", "HEAD", "POST"}),
        ("OPTIONS", f"{UI}/teams/x/keys", {"GET", "HEAD", "POST"}),
        ("DELETE", f"{UI}/keys/x", {"GET", "HEAD", "POST"}),
        ("POST", f"{UI}/static/console.js", {"GET", "HEAD"}),
    ):
        answer = _http(console_gateway, method, path, cookie=signed.cookie)
        _assert_console_page(answer, 405)
        assert f"This page does not take {method} requests." in answer.body
        assert {m.strip() for m in answer.headers["allow"].split(",")} == allowed
    # HEAD still answers as GET does, headers included.
    head = _http(console_gateway, "HEAD", f"{UI}/teams", cookie=signed.cookie)
    _assert_console_page(head, 200)


def test_a_date_at_the_edge_of_the_calendar_is_no_error(console_gateway: Gateway) -> None:
    signed = _sign_in_http(console_gateway)
    for query in ("until=0001-01-01", "until=0001-01-03", "since=9999-12-31&until=9999-12-31"):
        page = _http(console_gateway, "GET", f"{UI}/usage?{query}", cookie=signed.cookie)
        _assert_console_page(page, 200)
        answer = _http(console_gateway, "GET", f"{UI}/usage.csv?{query}", cookie=signed.cookie)
        assert answer.status == 200
        assert answer.headers["content-type"].startswith("text/csv")


def test_csv_cells_a_spreadsheet_would_run_are_neutralised(
    console_gateway: Gateway, redis_client: redis.Redis
) -> None:
    """Model and team names cannot start with these today; the stored rows are read back as they
    are, so the CSV must not count on it: a name from an older release, or a store shared with
    other writers, would run as a formula in the admin's spreadsheet."""
    team = console_gateway.new_team()
    day = dt.datetime.now(dt.UTC).date().isoformat()
    names = ['=HYPERLINK("http://example.invalid","x")', "+1+1", "-2+3", "@SUM(1)", "\tx", "plain=1"]
    usage_key = redis_keys.usage_day(team, day)
    for name in names:
        redis_client.hset(usage_key, f"k1|{name}|chat|requests", 1)
    redis_client.sadd(redis_keys.usage_days(team), day)
    signed = _sign_in_http(console_gateway)
    answer = _http(console_gateway, "GET", f"{UI}/usage.csv?team={team}&by=model", cookie=signed.cookie)
    assert answer.status == 200
    header, *rows = list(csv.reader(io.StringIO(answer.body)))
    assert header[:2] == ["day", "model"]
    shown = sorted(row[1] for row in rows)
    assert shown == sorted(["'" + n for n in names if n[0] in "=+-@\t"] + ["plain=1"])
    # The admin API's CSV goes through the same rule.
    api = _http(
        console_gateway,
        "GET",
        f"/admin/v1/usage?team={team}&group_by=model&format=csv",
        authorization=f"Bearer {console_gateway.admin_token}",
    )
    assert api.status == 200
    api_rows = list(csv.DictReader(io.StringIO(api.body)))
    assert sorted(str(row["model"]) for row in api_rows) == shown
    # The page shows them as they are, as text.
    page = _http(console_gateway, "GET", f"{UI}/usage?team={team}&by=model", cookie=signed.cookie)
    assert '<td class="group">=HYPERLINK(&#34;http://example.invalid&#34;,&#34;x&#34;)</td>' in page.body


def test_a_new_secret_is_shown_only_to_its_own_session_and_only_by_a_get(console_gateway: Gateway) -> None:
    team = console_gateway.new_team()
    owner, other = _sign_in_http(console_gateway), _sign_in_http(console_gateway)
    body = urllib.parse.urlencode({"name": "flash", "csrf": owner.csrf}).encode()
    created = _http(console_gateway, "POST", f"{UI}/teams/{team}/keys", body, cookie=owner.cookie, **_FORM)
    assert created.status == 303
    location = created.headers["location"]
    assert re.fullmatch(rf"{UI}/teams/{team}/keys\?flash=[\w-]+", location)
    # Another session that learns the address (a log line, a shared screen) finds nothing there,
    # and a HEAD by anyone uses nothing up.
    assert 'id="secret-value"' not in _http(console_gateway, "GET", location, cookie=other.cookie).body
    assert _http(console_gateway, "HEAD", location, cookie=owner.cookie).status == 200
    shown = _http(console_gateway, "GET", location, cookie=owner.cookie)
    _assert_console_page(shown, 200)
    found = re.search(r'id="secret-value" readonly value="([^"]+)"', shown.body)
    assert found is not None
    console_gateway.secrets_created.append(found.group(1))
    assert found.group(1) not in location
    # Once.
    assert 'id="secret-value"' not in _http(console_gateway, "GET", location, cookie=owner.cookie).body


def _body_csrf(page: Page) -> str:
    header = page.evaluate("() => document.body.getAttribute('hx-headers')")
    assert isinstance(header, str)
    token = re.search(r'"X-CSRF-Token": "([^"]+)"', header)
    assert token is not None
    return token.group(1)


def test_signing_out_leaves_nothing_of_the_session_in_the_tab(
    browser: Browser, console_gateway: Gateway
) -> None:
    context = browser.new_context()
    try:
        page = context.new_page()
        sign_in(page, console_gateway)
        expect(page.locator("h1")).to_have_text("Teams")
        first = page.locator("#new-team input[name=csrf]").input_value()
        assert _body_csrf(page) == first
        page.click(".signout button")
        expect(page.locator("input[name=token]")).to_be_visible()
        # The signed-out page is a page of its own: no boosting, no header of the old session.
        assert page.evaluate("() => document.body.getAttribute('hx-headers')") is None
        assert page.evaluate("() => document.body.getAttribute('hx-boost')") is None
        page.fill("input[name=token]", console_gateway.admin_token)
        page.click("button[type=submit]")
        expect(page.locator("h1")).to_have_text("Teams")
        second = page.locator("#new-team input[name=csrf]").input_value()
        assert second != first
        assert _body_csrf(page) == second
    finally:
        context.close()


def test_a_form_body_that_stops_arriving_is_a_408_not_a_redis_outage(make_gateway: GatewayFactory) -> None:
    # The Redis bound (4 x 1 s) is shorter than the body's (5 s): the body's is the one that counts.
    with make_gateway(redis_timeout_s=1.0, body_timeout_s=5.0) as gateway:
        signed = _sign_in_http(gateway)
        url = urllib.parse.urlsplit(gateway.url)
        assert url.hostname is not None
        with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
            part = f"csrf={signed.csrf}&name=".encode()
            head = (
                f"POST {UI}/teams HTTP/1.1\r\nHost: {url.netloc}\r\nCookie: {signed.cookie}\r\n"
                "Content-Type: application/x-www-form-urlencoded\r\n"
                f"Content-Length: {len(part) + 100}\r\n\r\n"
            )
            sock.sendall(head.encode() + part)  # and never the rest
            response = http.client.HTTPResponse(sock)
            response.begin()
            body = response.read().decode()
        assert response.status == 408
        assert response.headers["connection"] == "close"
        assert response.headers["content-type"].startswith("text/html")
        assert "did not arrive within 5 s" in body


def test_a_throttled_sign_in_says_when_to_try_again_and_the_right_token_still_signs_in(
    make_gateway: GatewayFactory,
) -> None:
    # The guesser and the admin share one address (loopback), as behind a NAT or an ingress.
    with make_gateway(admin_max_failures=1) as gateway:
        wrong = _http(gateway, "POST", f"{UI}/login", b"token=wrong", sec_fetch_site="same-origin", **_FORM)
        _assert_console_page(wrong, 401)
        locked = _http(gateway, "POST", f"{UI}/login", b"token=wrong", sec_fetch_site="same-origin", **_FORM)
        _assert_console_page(locked, 429)
        assert "set-cookie" not in locked.headers
        assert 1 <= int(locked.headers["retry-after"]) <= LOCKOUT_S
        right = urllib.parse.urlencode({"token": gateway.admin_token}).encode()
        signed_in = _http(gateway, "POST", f"{UI}/login", right, sec_fetch_site="same-origin", **_FORM)
        assert signed_in.status == 303
        assert "set-cookie" in signed_in.headers
