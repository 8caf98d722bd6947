"""How long a revoked key keeps working on a replica, on one Redis and on a Redis Cluster.

With the invalidation feed up, a revocation drops the cached key at once, whatever the time; while
the feed is down (its node died and the subscription has not moved yet, gateway/redis/subscribe.py)
the cache's TTL is the bound, as docs/scaling.md says. Both are proven on a clock the test owns, so
neither depends on how fast the machine is: with the clock frozen, only the feed can drop the key;
with no feed, the key works up to the TTL and not a tick beyond it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from typing import TypeVar

import pytest
from starlette.datastructures import Headers

from gateway.errors import ErrorCode, GatewayError
from gateway.keys.auth import Authenticator
from gateway.keys.store import KeyStore
from gateway.redis.client import RedisClient
from tests.redis_cluster import RedisServer, run_with_client
from tests.waiting import eventually

pytestmark = pytest.mark.also_on_cluster

T = TypeVar("T")
TTL_S = 1.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _works(auth: Authenticator, secret: str) -> bool:
    try:
        await auth.authenticate(Headers({"authorization": f"Bearer {secret}"}))
    except GatewayError as exc:
        if exc.code is not ErrorCode.INVALID_API_KEY:
            raise
        return False
    return True


async def _team_with_key(store: KeyStore) -> tuple[str, str]:
    team = "cb" + secrets.token_hex(4)
    await store.create_team(team)
    record, secret = await store.create_key(team)
    return record.id, secret


def test_while_the_feed_is_down_a_revoked_key_works_until_the_ttl_and_not_after(
    redis_server: RedisServer,
) -> None:
    async def scenario(redis: RedisClient) -> None:
        store = KeyStore(redis)
        clock = Clock()
        # No follow_invalidations task: the replica hears nothing, as while its feed's node is down.
        auth = Authenticator(store, cache_ttl_s=TTL_S, timeout_s=5.0, clock=clock)
        key_id, secret = await _team_with_key(store)
        assert await _works(auth, secret)

        await store.revoke(key_id)
        clock.now += TTL_S - 0.001
        assert await _works(auth, secret), "cached: the window the docs state"
        clock.now += 0.002
        assert not await _works(auth, secret), "a revoked key must not outlive the cache TTL"

    run_with_client(redis_server.url, scenario)


def test_with_the_feed_up_a_revocation_drops_the_cached_key_with_the_clock_stopped(
    redis_server: RedisServer,
) -> None:
    async def scenario(redis: RedisClient) -> None:
        store = KeyStore(redis)
        clock = Clock()  # never advanced: the TTL cannot be what drops the key
        auth = Authenticator(store, cache_ttl_s=TTL_S, timeout_s=5.0, clock=clock)
        key_id, secret = await _team_with_key(store)
        assert await _works(auth, secret)
        feed = asyncio.create_task(auth.follow_invalidations())
        try:
            # A (re)subscription marks every entry stale, so the key is read again once the feed
            # is up; wait for that read to have cached it afresh before revoking.
            await eventually(lambda: feed.done() or _subscribed(auth), "the feed is subscribed")
            assert await _works(auth, secret)
            await store.revoke(key_id)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10.0  # a bound on the wait, not on the delivery
            while await _works(auth, secret):
                assert not feed.done(), "the feed stopped"
                assert loop.time() < deadline, "the revocation never reached the replica's cache"
                await asyncio.sleep(0.01)
        finally:
            feed.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feed

    run_with_client(redis_server.url, scenario)


def _subscribed(auth: Authenticator) -> bool:
    # After subscribing, the feed restamps every cached entry as stale (expiry 0).
    return all(expiry == 0.0 for _, expiry in auth._cache.values())
