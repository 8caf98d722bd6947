"""A key's creation, step by step (gateway/keys/store.py's `create_key`; the steps and their order:
docs/api.md, "Admin writes, step by step"): the record first, with a TTL, so a creation that stops
half-way leaves nothing anyone could use; the secret returned only once every step has landed."""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from gateway.keys import rotation
from gateway.keys.record import Journal, KeyRecord, TeamInfo, TeamNotFoundError
from gateway.keys.steps import Checkpoint, RecordScripts
from gateway.limits.spec import LimitSet
from gateway.redis import keys as redis_keys
from gateway.redis.client import RedisClient


async def create_key(
    redis: RedisClient,
    scripts: RecordScripts,
    team: str,
    *,
    name: str,
    models: Sequence[str] | None,
    limits: LimitSet,
    expires_at: float | None,
    journal: Journal | None,
    created_by: Mapping[str, Any] | None,
    step: Checkpoint,
    team_info: Callable[[str], Awaitable[TeamInfo | None]],
    unfinished_s: int,
    keep_s: int,
) -> tuple[KeyRecord, str]:
    """The record and the secret. `unfinished_s`: how long the record and its pointer live until
    the last step; `keep_s`: how long they stay once a team's deletion marked them revoked."""
    info = await team_info(team)
    if info is None:
        raise TeamNotFoundError(team)
    record = KeyRecord(
        id="key_" + secrets.token_hex(8),
        team=team,
        name=name,
        models=frozenset(models) if models is not None else None,
        limits=limits,
        created_at=time.time(),
        revoked_at=None,
        expires_at=expires_at,
        team_id=info.id,
        created_by=created_by,
    )
    secret, secret_hash = rotation.new_secret()
    stored, pointer = redis_keys.key_by_hash(secret_hash), redis_keys.key_hash_by_id(record.id)
    await step("key.create")
    await scripts.create(stored, record.fields(), ttl_s=unfinished_s)
    await step("key.point")
    await redis.set(pointer, secret_hash, ex=unfinished_s)
    await step("key.list")
    await redis.sadd(redis_keys.team_keys(team), record.id)
    # A deletion of the team running meanwhile may not have seen this key (listed only
    # now). The key dies with the team all the same (its team id names the deleted team);
    # and once the team is gone, its secret is not handed out at all.
    await step("key.check_team")
    now = await team_info(team)
    if now is None or now.id != info.id:
        await scripts.mark(stored, "revoked_at", repr(time.time()), publish=secret_hash)
        raise TeamNotFoundError(team)
    if journal is not None:
        await step("key.journal")
        after = {"name": record.name, **record.changeable()}
        await journal.write("key.created", team=team, key_id=record.id, before={}, after=after)
    await step("key.keep_pointer")
    await redis.persist(pointer)
    # The last step: until it, the record goes by itself if the creation stops.
    await step("key.keep")
    await redis.persist(stored)
    # A team's deletion that marked the record since the team check gave it and the pointer
    # a TTL, which the PERSISTs above took away: give it back (a mark after this read sets
    # its own), or the dead record stays for good.
    if await redis.hexists(stored, "revoked_at"):
        await redis.expire(stored, keep_s)
        await redis.expire(pointer, keep_s)
    return record, secret
