"""The Redis side of stored responses (gateway/routing/stored_responses.py): one string per
response id (gateway/redis/keys.py `stored_response`), written first-holder-wins with a TTL."""

from __future__ import annotations

import asyncio

from gateway.redis import keys
from gateway.redis.client import RedisClient
from gateway.redis.store import RedisStore


class HolderStore(RedisStore):
    def __init__(self, redis: RedisClient, *, timeout_s: float) -> None:
        super().__init__(redis)
        self._timeout_s = timeout_s

    async def put_first(self, response_id: str, value: str, ttl_ms: int) -> bool:
        """Writes unless one is there (NX: the first holder stands); True when written."""
        async with asyncio.timeout(self._timeout_s):
            written = await self.redis.set(keys.stored_response(response_id), value, nx=True, px=ttl_ms)
        return bool(written)

    async def replace(self, response_id: str, value: str) -> None:
        """Rewrites one that is there (XX: one deleted meanwhile stays deleted), its TTL kept."""
        async with asyncio.timeout(self._timeout_s):
            await self.redis.set(keys.stored_response(response_id), value, xx=True, keepttl=True)

    async def get(self, response_id: str) -> str | None:
        async with asyncio.timeout(self._timeout_s):
            raw = await self.redis.get(keys.stored_response(response_id))
        return None if raw is None else keys.as_text(raw)

    async def delete(self, response_id: str) -> None:
        async with asyncio.timeout(self._timeout_s):
            await self.redis.delete(keys.stored_response(response_id))
