"""Console sessions without a browser, on a real Redis: what a cookie proves, and what it stops
proving (forged, ended, expired, another secret)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
from collections.abc import Coroutine
from typing import Any

import redis.asyncio
from starlette.requests import Request

from gateway.console.console_store import ConsoleStore
from gateway.console.session import COOKIE, Sessions
from gateway.identity.principal import BREAK_GLASS, Kind, Principal
from gateway.redis.shared_secret import SharedSecret
from tests.redis_cluster import RedisServer

SECRET = "s" * 40
ALICE = Principal(
    Kind.PERSON, subject="alice", issuer="https://idp", email="alice@example.test", groups=frozenset({"g"})
)


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


def _in_own_loop(coroutine: Coroutine[Any, Any, None]) -> None:
    """On a thread of its own: the browser tests' Playwright keeps an event loop running on this
    one, where asyncio.run() may not start another."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coroutine).result()


def _sessions(
    client: redis.asyncio.Redis, secret: str | None = SECRET, ttl_s: float = 60, **kw: object
) -> Sessions:
    shared = SharedSecret(client, "sg:test:session-secret", secret, timeout_s=2)
    return Sessions(ConsoleStore(client), shared, ttl_s=ttl_s, **kw)  # type: ignore[arg-type]


def test_a_signed_cookie_is_a_session_with_its_person_and_csrf_token(redis_server: RedisServer) -> None:
    async def run() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        sessions = _sessions(client)
        session, cookie = await sessions.new(ALICE)
        read = await sessions.read(_request(cookie))
        assert read == session
        assert read is not None
        assert read.principal == ALICE
        assert sessions.csrf_ok(session, session.csrf)
        assert not sessions.csrf_ok(session, None)
        assert not sessions.csrf_ok(session, "é")
        other, _ = await sessions.new(ALICE)
        assert not sessions.csrf_ok(session, other.csrf)
        await client.aclose()

    _in_own_loop(run())


def test_forged_ended_expired_or_other_secret_cookies_are_no_session(redis_server: RedisServer) -> None:
    async def run() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        sessions = _sessions(client)
        session, cookie = await sessions.new(BREAK_GLASS, bound_to="abc")
        version, session_id, signature = cookie.split(".")
        assert (await sessions.read(_request(cookie))) is not None
        assert await sessions.read(_request(f"{version}.other.{signature}")) is None
        assert await sessions.read(_request("garbage")) is None
        assert await sessions.read(_request(f"v1.{session_id}.1.{signature}")) is None
        # Another secret signs differently: its replicas refuse the cookie.
        assert await _sessions(client, "u" * 40).read(_request(cookie)) is None
        # Ended: gone for every replica.
        await sessions.end(session)
        assert await sessions.read(_request(cookie)) is None
        _, expired = await _sessions(client, ttl_s=-1).new(ALICE)
        assert await sessions.read(_request(expired)) is None
        await client.aclose()

    _in_own_loop(run())


def test_without_a_configured_secret_every_replica_mints_and_shares_one(redis_server: RedisServer) -> None:
    async def run() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        await client.delete("sg:test:session-secret")
        one, two = _sessions(client, None), _sessions(client, None)
        _, cookie = await one.new(ALICE)
        assert (await two.read(_request(cookie))) is not None
        await client.aclose()

    _in_own_loop(run())


def test_the_cookie_is_secure_over_https_from_a_trusted_proxy_only(redis_server: RedisServer) -> None:
    async def run() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        sessions = _sessions(client, trusted=(ipaddress.ip_network("10.0.0.0/8"),))
        assert sessions.over_https(_request(proto="https"))
        assert not sessions.over_https(_request(proto="https", peer="192.0.2.1"))
        assert not sessions.over_https(_request())
        await client.aclose()

    _in_own_loop(run())
