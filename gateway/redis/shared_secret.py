"""A secret every replica shares: configured in the environment, or minted once into Redis.

Without a configured value the first replica to ask mints one with SET NX and every replica reads
the one that stands, so all of them agree without an operator choosing one. It is read from Redis
once per process (one read at a time, shared by every waiter); while Redis cannot say, callers get
a 503 `redis_unavailable`. Used for per-team cache salts (gateway/proxy/cache_salt.py) and the
console's session cookies (gateway/console/session.py).
"""

from __future__ import annotations

import asyncio
import secrets

from redis.exceptions import RedisError

from gateway.errors import StoreUnavailable
from gateway.redis.client import RedisClient


class SharedSecret:
    def __init__(self, redis: RedisClient, key: str, configured: str | None, *, timeout_s: float) -> None:
        self._redis = redis
        self._key = key
        self._timeout_s = timeout_s
        # The secret once known: a hot path reads this attribute and awaits get() only before.
        self.known: bytes | None = configured.encode() if configured else None
        self._loading: asyncio.Future[bytes] | None = None

    async def get(self) -> bytes:
        if self.known is not None:
            return self.known
        if self._loading is None or self._loading.done():
            self._loading = asyncio.ensure_future(self._load())
            self._loading.add_done_callback(_seen)
        try:
            async with asyncio.timeout(self._timeout_s):
                self.known = await asyncio.shield(self._loading)
        except (RedisError, OSError, TimeoutError) as exc:
            raise StoreUnavailable(
                type(exc).__name__, "The key store is unavailable; try again shortly."
            ) from None
        return self.known

    async def _load(self) -> bytes:
        minted = secrets.token_urlsafe(32)
        # NX: the first replica's secret stands; every other replica reads that one.
        await self._redis.set(self._key, minted, nx=True)
        stored = await self._redis.get(self._key)
        if not stored:
            raise RedisError("shared secret vanished")
        return bytes(stored) if isinstance(stored, bytes | bytearray) else str(stored).encode()


def _seen(done: asyncio.Future[bytes]) -> None:
    if not done.cancelled():
        done.exception()  # every waiter may have given up on it: mark the error as seen
