"""The Redis side of the console: sessions (one string each, with the session's TTL), a created
key's one-time secret between the POST and the page that shows it (a flash, read once), and a
sign-in's OIDC flow between the redirect to the identity provider and its return (read once).
Each is one key (gateway/redis/keys.py) and one command."""

from __future__ import annotations

from gateway.redis import keys as redis_keys
from gateway.redis.store import RedisStore


class ConsoleStore(RedisStore):
    async def put_session(self, session_id: str, record: bytes, ttl_s: int) -> None:
        await self.redis.set(redis_keys.console_session(session_id), record, ex=ttl_s)

    async def get_session(self, session_id: str) -> bytes | None:
        return _bytes(await self.redis.get(redis_keys.console_session(session_id)))

    async def delete_session(self, session_id: str) -> None:
        await self.redis.delete(redis_keys.console_session(session_id))

    async def put_flash(self, flash_id: str, value: bytes, ttl_s: int) -> None:
        await self.redis.set(redis_keys.console_flash(flash_id), value, ex=ttl_s)

    async def take_flash(self, flash_id: str) -> bytes | None:
        """The flash, deleted as it is read: shown once."""
        return _bytes(await self.redis.getdel(redis_keys.console_flash(flash_id)))

    async def put_flow(self, state: str, record: bytes, ttl_s: int) -> None:
        await self.redis.set(redis_keys.console_oidc_flow(state), record, ex=ttl_s)

    async def take_flow(self, state: str) -> bytes | None:
        """The flow, deleted as it is read: a state is used once."""
        return _bytes(await self.redis.getdel(redis_keys.console_oidc_flow(state)))


def _bytes(raw: bytes | str | None) -> bytes | None:
    # The gateway's client does not decode (gateway/redis/client.py): bytes, or None.
    return raw.encode() if isinstance(raw, str) else raw
