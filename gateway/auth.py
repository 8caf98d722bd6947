"""Bearer-key authentication with a short local cache.

The cache saves a Redis round trip per request. Revocations and rotations are published on a
Redis channel that every replica follows, dropping the entry at once; the TTL (1 s by default)
is the backstop for a replica whose subscription was down. Expiry is checked on every request
against the cached record, so an expired key stops at its time even while cached.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.datastructures import Headers

from gateway import redis_keys
from gateway.errors import ErrorCode, GatewayError
from gateway.keystore import KeyRecord, KeyStore, hash_secret

_MAX_CACHED = 50_000
log = logging.getLogger("sluicegate.auth")


def bearer_token(headers: Headers) -> str | None:
    value = headers.get("authorization")
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None


class Authenticator:
    def __init__(self, store: KeyStore, *, cache_ttl_s: float, timeout_s: float) -> None:
        self._store = store
        self._ttl = cache_ttl_s
        self._timeout_s = timeout_s
        self._cache: dict[str, tuple[KeyRecord | None, float]] = {}

    async def authenticate(self, headers: Headers) -> KeyRecord:
        token = bearer_token(headers)
        if token is None:
            raise GatewayError(
                ErrorCode.INVALID_API_KEY,
                "Missing API key: send it as 'Authorization: Bearer <key>'.",
            )
        secret_hash = hash_secret(token)
        record = await self._lookup(secret_hash)
        if record is None:
            raise GatewayError(ErrorCode.INVALID_API_KEY, "Invalid API key.")
        refusal = record.refusal(time.time())
        if refusal is not None:
            raise GatewayError(ErrorCode.INVALID_API_KEY, refusal)
        return record

    async def _lookup(self, secret_hash: str) -> KeyRecord | None:
        now = time.monotonic()
        cached = self._cache.get(secret_hash)
        if cached is not None and cached[1] > now:
            return cached[0]
        try:
            async with asyncio.timeout(self._timeout_s):
                record = await self._store.lookup(secret_hash)
        except (RedisError, TimeoutError):
            if cached is not None and cached[0] is not None:
                # A key this replica saw moments ago keeps working through a Redis blip.
                return cached[0]
            raise GatewayError(
                ErrorCode.REDIS_UNAVAILABLE, "The key store is unavailable; try again shortly."
            ) from None
        if len(self._cache) >= _MAX_CACHED:
            self._cache.clear()
        self._cache[secret_hash] = (record, now + self._ttl)
        return record

    def forget(self, secret_hash: str) -> None:
        self._cache.pop(secret_hash, None)

    async def follow_invalidations(self, redis: Redis) -> None:
        """Runs for the app's life: drops every secret hash published on the channel. Whatever was
        published while the subscription was down is unknown, so each (re)subscription clears the
        cache; during the outage itself cached keys keep working (a revocation needs Redis too)."""
        backoff = 0.1
        while True:
            pubsub = redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(redis_keys.KEY_INVALIDATIONS)
                self._cache.clear()
                backoff = 0.1
                async for message in pubsub.listen():
                    if message["type"] == "message":
                        self.forget(redis_keys.as_text(message["data"]))
            except (RedisError, OSError) as exc:
                log.warning("key invalidation feed lost (%s); retrying", type(exc).__name__)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]  # untyped in redis-py
