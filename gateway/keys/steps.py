"""The key store's writes as single-key steps, so each runs on one Redis Cluster node.

A key's record is found by its secret's hash (`sg:key:<sha256>`) without knowing its team, so no
write that touches it can share one hash slot with the team's records or the audit stream: a
change is a sequence of steps, each one key, ordered so that stopping after any of them is safe
(see the order each write gives in gateway/keys/store.py, rotation.py and deletion.py, and
docs/api.md, "Admin writes, step by step"). A step that must read and write together is a Lua
script on its one key:

  record_create.lua  create a hash only if absent (optionally with a TTL)
  record_swap.lua    compare-and-set fields of an existing hash, and publish the invalidation
  record_mark.lua    set a field once on an existing hash (a revocation), and publish
  pointer_swap.lua   move a key id's pointer only from the secret the caller read

`Checkpoint` is where a test stops a write between two steps, or runs another write there
(tests/integration/test_key_store_steps.py): the store awaits it with the name of the step about
to run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from gateway.redis import keys as redis_keys
from gateway.redis.client import RedisClient
from gateway.redis.keys import EncodableT
from gateway.redis.scripts import load_script

Checkpoint = Callable[[str], Awaitable[None]]


async def no_checkpoint(step: str) -> None:
    """Production's checkpoint: every step runs, with nothing between them."""


def _flat(pairs: Mapping[str, EncodableT]) -> list[EncodableT]:
    return [item for field, value in pairs.items() for item in (field, value)]


class RecordScripts:
    """The key store's single-key scripts, registered once per client (redis-py runs them by SHA
    and reloads one on NOSCRIPT; on a cluster, on the node of the key's slot)."""

    def __init__(self, redis: RedisClient) -> None:
        self._create = load_script(redis, "record_create")
        self._swap = load_script(redis, "record_swap")
        self._mark = load_script(redis, "record_mark")
        self._pointer = load_script(redis, "pointer_swap")

    async def create(self, key: str, fields: Mapping[str, EncodableT], *, ttl_s: int = 0) -> bool:
        """False when `key` already exists (nothing written)."""
        return bool(await self._create(keys=[key], args=[ttl_s, *_flat(fields)]))

    async def swap(
        self,
        key: str,
        expected: Mapping[str, EncodableT],
        written: Mapping[str, EncodableT],
        *,
        deleted: Iterable[str] = (),
        ttl_s: int = 0,
        publish: str | None = None,
    ) -> int:
        """1: written; 0: an expected field differs (read again and retry); -1: no such hash."""
        args: list[Any] = [
            redis_keys.KEY_INVALIDATIONS if publish is not None else "",
            publish or "",
            ttl_s,
            len(expected),
            *_flat(expected),
            len(written),
            *_flat(written),
            *deleted,
        ]
        return int(await self._swap(keys=[key], args=args))

    async def mark(
        self, key: str, field: str, value: str, *, ttl_s: int = 0, publish: str | None = None
    ) -> bytes | None:
        """The field's value once set (the earlier one if it was set), or None for no such hash."""
        channel = redis_keys.KEY_INVALIDATIONS if publish is not None else ""
        result = await self._mark(keys=[key], args=[field, value, ttl_s, channel, publish or ""])
        return result if isinstance(result, bytes) else None

    async def mark_all(
        self, keys: Sequence[str], field: str, value: str, *, ttl_s: int, publish: Sequence[str]
    ) -> None:
        """`mark` on many hashes (each publishing its message of `publish`) in one pipeline, not a
        transaction: one round trip (on a cluster, one per node at once), each mark still one
        key's step. A Redis that lost the script answers NOSCRIPT: it is loaded and the whole
        batch sent again (a mark keeps the value it finds, so one that landed changes nothing)."""
        channel = redis_keys.KEY_INVALIDATIONS
        pairs = zip(keys, publish, strict=True)
        await self._mark.run_batch([([key], [field, value, ttl_s, channel, msg]) for key, msg in pairs])

    async def move_pointer(self, key: str, old: str, new: str) -> bool:
        return bool(await self._pointer(keys=[key], args=[old, new]))
