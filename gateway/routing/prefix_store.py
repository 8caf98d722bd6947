"""The Redis side of the shared prefix index (gateway/routing/prefix_share.py): one stream, one
hash tag (gateway/redis/keys.py `prefix_log`), trimmed to about `max_entries` and expiring when
no replica writes to it."""

from __future__ import annotations

from typing import Any

from gateway.redis import keys
from gateway.redis.client import RedisClient
from gateway.redis.store import RedisStore


class PrefixStore(RedisStore):
    def __init__(self, redis: RedisClient, *, key: str | None = None) -> None:
        super().__init__(redis)
        self._key = key or keys.prefix_log()

    async def append(self, fields: dict[bytes, bytes], *, max_entries: int, ttl_s: int) -> None:
        """One entry, and the stream's TTL renewed: one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xadd(self._key, fields, maxlen=max_entries, approximate=True)  # type: ignore[arg-type]
            pipe.expire(self._key, ttl_s)
            await pipe.execute()

    async def read(self, after: bytes, count: int) -> list[tuple[bytes, Any]]:
        """Up to `count` entries after the id `after`: (id, fields), fields as Redis gave them
        (whoever can write to Redis can write anything there: the caller checks them)."""
        reply: Any = await self.redis.xread({self._key: after}, count=count)
        # RESP2 answers [[key, entries]], RESP3 {key: entries}.
        streams = reply.values() if isinstance(reply, dict) else [entries for _, entries in reply or ()]
        return [(entry_id, fields) for entries in streams for entry_id, fields in entries]
