"""Console sessions without a browser: what a cookie proves, and what it stops proving."""

from __future__ import annotations

import ipaddress

from starlette.requests import Request

from gateway.console.session import COOKIE, Sessions

TOKEN = "t" * 40


def _request(cookie: str | None = None, *, peer: str = "10.0.0.9", proto: str | None = None) -> Request:
    headers = []
    if cookie is not None:
        headers.append((b"cookie", f"{COOKIE}={cookie}".encode()))
    if proto is not None:
        headers.append((b"x-forwarded-proto", proto.encode()))
    scope = {
        "type": "http",
        "method": "GET",
        "scheme": "http",
        "path": "/admin/ui/teams",
        "query_string": b"",
        "headers": headers,
        "client": (peer, 5000),
        "server": ("gw", 80),
    }
    return Request(scope)


def test_a_signed_cookie_is_a_session_and_carries_its_csrf_token() -> None:
    sessions = Sessions(TOKEN, ttl_s=60)
    session, cookie = sessions.new()
    read = sessions.read(_request(cookie))
    assert read == session
    assert sessions.csrf_ok(session, session.csrf)
    assert not sessions.csrf_ok(session, None)
    assert not sessions.csrf_ok(session, Sessions(TOKEN, ttl_s=60).new()[0].csrf)


def test_forged_expired_or_other_token_cookies_are_no_session() -> None:
    sessions = Sessions(TOKEN, ttl_s=60)
    _, cookie = sessions.new()
    version, session_id, expires, signature = cookie.split(".")
    later = str(int(expires) + 3600)
    assert sessions.read(_request(f"{version}.{session_id}.{later}.{signature}")) is None
    assert sessions.read(_request(f"{version}.other.{expires}.{signature}")) is None
    assert sessions.read(_request("garbage")) is None
    # A changed admin token ends every session.
    assert Sessions("u" * 40, ttl_s=60).read(_request(cookie)) is None
    _, expired = Sessions(TOKEN, ttl_s=-1).new()
    assert sessions.read(_request(expired)) is None


def test_the_cookie_is_secure_over_https_from_a_trusted_proxy_only() -> None:
    trusted = (ipaddress.ip_network("10.0.0.0/8"),)
    sessions = Sessions(TOKEN, ttl_s=60, trusted=trusted)
    assert sessions.over_https(_request(proto="https"))
    assert not sessions.over_https(_request(proto="https", peer="192.0.2.1"))
    assert not sessions.over_https(_request())
