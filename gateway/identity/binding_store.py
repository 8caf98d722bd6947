"""The Redis side of role bindings (gateway/identity/bindings.py): one hash
(redis_keys.role_bindings), a binding per field under its id, at most MAX_BINDINGS."""

from __future__ import annotations

from collections.abc import Iterable

from gateway.identity.bindings import MAX_BINDINGS, RoleBinding, Subject, TooManyBindings
from gateway.redis import keys as redis_keys
from gateway.redis.store import RedisStore


class BindingStore(RedisStore):
    async def all(self) -> list[RoleBinding]:
        raw = await self.redis.hgetall(redis_keys.role_bindings())
        return sorted((RoleBinding.from_json(v) for v in raw.values()), key=lambda b: b.created_at)

    async def add(self, binding: RoleBinding) -> RoleBinding | None:
        """Stores `binding`; returns the one already there for the same subject, role and team
        (and stores nothing) when there is one."""
        key = redis_keys.role_bindings()
        if await self.redis.hlen(key) >= MAX_BINDINGS:
            raise TooManyBindings()
        if await self.redis.hsetnx(key, binding.id, binding.to_json()):
            return None
        existing = await self.redis.hget(key, binding.id)
        return RoleBinding.from_json(existing) if existing else None

    async def remove(self, binding_id: str) -> RoleBinding | None:
        key = redis_keys.role_bindings()
        raw = await self.redis.hget(key, binding_id)
        if raw is None or not await self.redis.hdel(key, binding_id):
            return None
        return RoleBinding.from_json(raw)

    async def remove_user(self, *, subject: str | None, emails: Iterable[str]) -> list[RoleBinding]:
        """Removes every user binding that names this person, as `matches` would: their subject
        exactly, or one of their emails in any case (a SCIM user deleted, gateway/scim/users.py).
        Returns the bindings removed."""
        folded = {e.lower() for e in emails if e}
        gone = [
            b
            for b in await self.all()
            if b.subject_kind is Subject.USER
            and ((subject is not None and b.subject == subject) or b.subject.lower() in folded)
        ]
        if gone:
            await self.redis.hdel(redis_keys.role_bindings(), *(b.id for b in gone))
        return gone
