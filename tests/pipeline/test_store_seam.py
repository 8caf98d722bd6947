"""Tests can hand the pipeline a store (gateway/stores.py): a gateway given an in-process usage
store settles its requests there and reports its usage from there, while Redis (which still holds
its keys) holds none of that usage. The store implements the few methods the meter declares
(gateway/metering/meter.py `UsageWrites`), as a second backend would."""

from __future__ import annotations

import redis

from gateway.metering.record import UsageRecord
from gateway.redis import keys as redis_keys
from gateway.stores import Stores
from tests.conftest import FAKE_MODEL, GatewayFactory

COUNTERS = ("requests", "prompt_tokens", "completion_tokens", "errors", "disconnects", "cost_nano")


class MemoryUsage:
    """settle.lua's usage side, in process: each request id counted once, one hash of counters
    per team and day, fields `<key>|<model>|<api>|<price version>|<counter>` as Redis keeps them."""

    def __init__(self) -> None:
        self.counted: set[str] = set()
        self.hashes: dict[tuple[str, str], dict[bytes, int]] = {}

    async def settle(self, batch: list[UsageRecord]) -> None:
        for usage in batch:
            await self.record(usage)

    async def record(self, usage: UsageRecord) -> bool:
        if usage.void or usage.request_id in self.counted:
            return False
        self.counted.add(usage.request_id)
        fields = self.hashes.setdefault((usage.team, usage.day), {})
        values = (
            1,
            usage.prompt_tokens,
            usage.completion_tokens,
            int(usage.error),
            int(usage.disconnected),
            usage.cost_nano,
        )
        for name, value in zip(COUNTERS, values, strict=True):
            field = f"{usage.key_id}|{usage.model}|{usage.api}|{usage.price_version}|{name}".encode()
            fields[field] = fields.get(field, 0) + value
        return True

    async def days(self, teams: list[str]) -> list[list[str]]:
        return [sorted(day for (team, day) in self.hashes if team == wanted) for wanted in teams]

    async def day_counters(self, wanted: list[tuple[str, str]]) -> list[dict[bytes, bytes]]:
        return [{k: str(v).encode() for k, v in self.hashes.get(w, {}).items()} for w in wanted]


def test_a_gateway_handed_a_usage_store_settles_and_reports_through_it(
    make_gateway: GatewayFactory, redis_client: redis.Redis | redis.RedisCluster
) -> None:
    usage = MemoryUsage()
    with make_gateway(stores=Stores(usage=usage)) as gw:
        team = gw.new_team()
        key = gw.new_key(team)
        reply = gw.client(key["key"]).chat.completions.create(
            model=FAKE_MODEL, messages=[{"role": "user", "content": "hi there"}]
        )
        rows = gw.usage(team)  # the report writes this replica's pending usage first
    assert reply.usage is not None
    assert len(usage.counted) == 1
    [row] = rows
    assert (row["key_id"], row["model"], row["requests"]) == (key["id"], FAKE_MODEL, 1)
    assert (row["prompt_tokens"], row["completion_tokens"]) == (
        reply.usage.prompt_tokens,
        reply.usage.completion_tokens,
    )
    # Redis still holds the team and its key, and none of its usage.
    assert redis_client.exists(redis_keys.team(team))
    assert not redis_client.exists(redis_keys.usage_days(team))
