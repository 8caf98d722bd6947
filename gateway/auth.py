"""Bearer-key authentication with a short local cache.

The cache saves a Redis round trip per request; its TTL (1 s by default) bounds how long a revoked
key keeps working on a replica that did not see the revocation itself. The replica that revokes
drops the entry at once.
"""

from __future__ import annotations

import asyncio
import time

from redis.exceptions import RedisError
from starlette.datastructures import Headers

from gateway.errors import ErrorCode, GatewayError
from gateway.keystore import KeyRecord, KeyStore, hash_secret

_MAX_CACHED = 50_000


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
        if record.revoked:
            raise GatewayError(ErrorCode.INVALID_API_KEY, f"API key {record.id} has been revoked.")
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
