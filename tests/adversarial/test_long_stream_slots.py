"""A stream that outlives its concurrency slot's lease: a key limited to one request at a time must
not get a second one admitted while the first still runs, however long it runs; and the slot is
free again once the stream ends.

The lease is set short (0.5 s) so the test runs in seconds. Nothing is timed: the slot's expiry is
read from Redis, and the test waits on Redis's own clock until the first lease it got has ended,
then checks the slot's expiry moved on (renewed) and the second request is still refused."""

from __future__ import annotations

from typing import Any, cast

import redis

from gateway.redis import keys as redis_keys
from tests.conftest import FAKE_MODEL, GatewayFactory
from tests.http import post
from tests.waiting import wait_until

LEASE_S = 0.5
# Seconds since 2017, as admit.lua and renew.lua count: the scores of the slots' sorted set.
_EPOCH = 1483228800


def _redis_now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return float(seconds - _EPOCH) + micros / 1e6


def _only_expiry(client: redis.Redis, slots: str) -> float:
    """The expiry (score) of the one slot held in `slots`."""
    ((_, expiry),) = cast(list[tuple[bytes, float]], client.zrange(slots, 0, -1, withscores=True))
    return expiry


def _chat(gw_url: str, key: str) -> Any:
    body = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "hi"}]}
    return post(f"{gw_url}/v1/chat/completions", body, key=key)


def test_a_stream_longer_than_its_lease_keeps_its_slot_and_frees_it_at_the_end(
    make_gateway: GatewayFactory, redis_client: redis.Redis
) -> None:
    with make_gateway(concurrency_lease_s=LEASE_S) as gw:
        key = gw.new_key(max_concurrency=1)
        slots = redis_keys.rate_limit(key["team"], f"key:{key['id']}:conc")
        client = gw.client(key["key"])
        stream = client.chat.completions.create(
            model=FAKE_MODEL,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            max_tokens=2000,
            # About 100 s of output: far longer than any lease here; closed once checked.
            extra_headers={"x-fake-tokens": "2000", "x-fake-token-delay-ms": "50"},
        )
        try:
            next(iter(stream))  # it runs
            first_expiry = _only_expiry(redis_client, slots)
            # Redis's clock passes the end of the lease the stream was admitted with ...
            wait_until(lambda: _redis_now(redis_client) > first_expiry + LEASE_S, 30, "first lease over")
            # ... and the slot is still held, its expiry renewed past it.
            assert _only_expiry(redis_client, slots) > first_expiry + LEASE_S
            refused = _chat(gw.url, key["key"])
            assert refused.status == 429, refused.body
            assert "concurrent" in refused.json()["error"]["message"]
        finally:
            stream.close()
        # Once the stream ended, its slot is released: the next request is admitted.
        wait_until(lambda: redis_client.zcard(slots) == 0, 10, "slot released")
        assert _chat(gw.url, key["key"]).status == 200
