"""The Redis side of the admin audit log (gateway/admin/audit.py): one stream (gateway/redis/keys.py
`audit_log`), trimmed to about `max_entries` as it is written; read newest first, a page at a
time. An entry's id is Redis's own clock."""

from __future__ import annotations

from typing import cast

from gateway.redis import keys as redis_keys
from gateway.redis.client import RedisClient
from gateway.redis.keys import EncodableT
from gateway.redis.store import RedisStore


class AuditStore(RedisStore):
    def __init__(self, redis: RedisClient, *, max_entries: int) -> None:
        super().__init__(redis)
        self._max_entries = max_entries

    async def append(self, fields: dict[str, EncodableT]) -> None:
        await self.redis.xadd(redis_keys.audit_log(), fields, maxlen=self._max_entries, approximate=True)  # type: ignore[arg-type]

    async def newest(self, top: str, bottom: str, count: int) -> list[tuple[bytes, dict[bytes, bytes]]]:
        """Up to `count` entries with ids from `top` down to `bottom` ("+" and "-": either end).
        Replies are bytes: the gateway's client does not decode (gateway.redis.keys.as_text)."""
        return cast(
            list[tuple[bytes, dict[bytes, bytes]]],
            await self.redis.xrevrange(redis_keys.audit_log(), max=top, min=bottom, count=count),
        )
