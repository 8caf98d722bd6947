"""The Redis side of usage (gateway/metering/meter.py): settle.lua per finished request, which
writes its usage, settles its limits and frees its slots in one script call (one hash tag per
team: gateway/redis/keys.py), and the usage report's reads. Each batch of records is one round
trip: a single record is a plain EVALSHA on the lean connections, more are one pipeline."""

from __future__ import annotations

import asyncio

from gateway.metering.record import UsageRecord
from gateway.redis import keys as redis_keys
from gateway.redis.client import RedisClient
from gateway.redis.scripts import load_script
from gateway.redis.store import RedisStore

_MARKER_TTL_S = 24 * 3600
_USAGE_TTL_S = 400 * 24 * 3600


def _keys(usage: UsageRecord) -> list[str]:
    keys = [
        redis_keys.request_marker(usage.team, usage.request_id),
        redis_keys.usage_day(usage.team, usage.day),
        redis_keys.usage_days(usage.team),
        redis_keys.admission_marker(usage.team, usage.request_id),
        redis_keys.key_last_used(usage.team),
    ]
    keys.extend([key for key, _, _ in usage.settlements])  # one call, not a resumption per key
    return keys


def _costed(usage: UsageRecord) -> bool:
    """Written with its cost: every record since costs are recorded (all of them have an api)."""
    return bool(usage.api and usage.price_version)


def _field_prefix(usage: UsageRecord) -> str:
    # A record spooled before the api (or its cost) existed has none: it is written in the layout
    # it came from.
    if _costed(usage):
        if usage.served_by:  # an overflow provider's usage: rows of their own
            return f"{usage.key_id}|{usage.model}|{usage.api}|{usage.price_version}|{usage.served_by}"
        return f"{usage.key_id}|{usage.model}|{usage.api}|{usage.price_version}"
    if usage.api:
        return f"{usage.key_id}|{usage.model}|{usage.api}"
    return f"{usage.key_id}|{usage.model}"


def _args(usage: UsageRecord) -> list[str | int]:
    return [
        _MARKER_TTL_S,
        _USAGE_TTL_S,
        usage.day,
        _field_prefix(usage),
        usage.prompt_tokens,
        usage.completion_tokens,
        int(usage.error),
        int(usage.disconnected),
        int(usage.void),
        # One string, not two arguments per limit: the client formats each argument on its own.
        "".join([f"{kind} {argument} " for _, kind, argument in usage.settlements]),
        usage.cost_nano if _costed(usage) else 0,
    ]


class UsageStore(RedisStore):
    def __init__(self, redis: RedisClient, *, timeout_s: float) -> None:
        super().__init__(redis)
        self._script = load_script(redis, "settle")
        self._timeout_s = timeout_s

    async def settle(self, batch: list[UsageRecord]) -> None:
        """One pipelined round trip of EVALSHA (`Script.run_batch`: no SCRIPT EXISTS first, the whole
        batch again after NOSCRIPT): settle.lua counts each request id once, so the records that
        did land are not counted twice. One record (every batch when requests come
        one at a time) goes as a plain EVALSHA: a pipeline's own machinery costs more than it."""
        async with asyncio.timeout(self._timeout_s):
            if len(batch) == 1:
                usage = batch[0]  # the script reloads itself on NOSCRIPT
                await self._script(keys=_keys(usage), args=_args(usage))
                return
            await self._script.run_batch([(_keys(usage), _args(usage)) for usage in batch])

    async def record(self, usage: UsageRecord) -> bool:
        """Writes one record now: True when written, False when its request id was already."""
        return bool(await self._script(keys=_keys(usage), args=_args(usage)))

    async def days(self, teams: list[str]) -> list[list[str]]:
        """Each team's days with usage, sorted: one round trip for every team at once (a pipeline
        of one-key reads, which a cluster client splits per node and sends in parallel)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for team in teams:
                pipe.smembers(redis_keys.usage_days(team))
            day_sets = await pipe.execute()
        return [sorted(redis_keys.as_text(d) for d in members) for members in day_sets]

    async def day_counters(self, wanted: list[tuple[str, str]]) -> list[dict[bytes, bytes]]:
        """The usage hash of each (team, day): one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for team, day in wanted:
                pipe.hgetall(redis_keys.usage_day(team, day))
            hashes: list[dict[bytes, bytes]] = await pipe.execute()
        return hashes
