"""The changes to teams and keys that a cached key must not outlive, for the admin API and the
console alike: the store's change, then this replica's key cache forgets what changed at once.

Other replicas hear the store's publish on `sg:keys:invalidate`; this one does not wait for its own
echo, so the answer to a revocation is never followed by one more request the key still passes.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.keys.record import Journal, KeyRecord
from gateway.keys.store import KeyStore
from gateway.limits.spec import LimitSet


class KeyChanges:
    def __init__(self, store: KeyStore, forget: Callable[[str], None]) -> None:
        """`forget`: drops a secret hash, or `team:<name>`, from this replica's key cache
        (gateway.keys.auth.Authenticator.forget)."""
        self._store = store
        self._forget = forget

    async def update_team(
        self, name: str, changes: LimitSet, cleared: set[str], *, journal: Journal | None
    ) -> LimitSet:
        limits = await self._store.update_team(name, changes, cleared, journal=journal)
        self._forget(f"team:{name}")
        return limits

    async def delete_team(self, name: str, *, journal: Journal | None) -> list[str]:
        """Revokes every key of the team and removes it; returns the revoked key ids."""
        return await self._store.delete_team(name, journal=journal, forget=self._forget)

    async def revoke(self, key_id: str, *, journal: Journal | None) -> KeyRecord:
        record, hashes = await self._store.revoke(key_id, journal=journal)
        for secret_hash in hashes:
            self._forget(secret_hash)
        return record
