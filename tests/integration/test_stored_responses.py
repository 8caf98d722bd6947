"""Which endpoint holds a stored response (gateway.routing.stored_responses), against a real Redis:
the first holder stands, ids that are not ids are never keys, a holder expires, and Redis down is a
503 on reading (never another team's response) and only a log line on writing."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets

import pytest
import redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from gateway.config import Settings
from gateway.errors import ErrorCode, GatewayError
from gateway.redis import keys
from gateway.redis.client import close_redis, connect_redis
from gateway.routing.holder_store import HolderStore
from gateway.routing.stored_responses import Holder, StoredResponses
from tests.redis_cluster import RedisServer
from tests.servers import free_port

pytestmark = pytest.mark.also_on_cluster

MINE = Holder("team-a", "m", "alias", "m", "http://10.0.0.1:8000")
THEIRS = Holder("team-b", "m", "m", "m", "http://10.0.0.2:8000")


def _run(url: str, steps: object) -> object:
    async def main() -> object:
        client = connect_redis(Settings(redis_url=url, redis_timeout_s=0.5))
        try:
            # Outside the steps' 0.5 s bound: the first call connects and, on a cluster, reads the
            # slot map and connects to every node, which a loaded test machine may not do within it.
            with contextlib.suppress(RedisError):
                if isinstance(client, RedisCluster):
                    await client.ping(target_nodes=RedisCluster.ALL_NODES)
                else:
                    await client.ping()
            return await steps(StoredResponses(HolderStore(client, timeout_s=0.5), ttl_s=60))  # type: ignore[operator]
        finally:
            await close_redis(client)

    return asyncio.run(main())


def test_the_first_holder_stands_and_forget_removes_it(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    rid = "resp_" + secrets.token_hex(8)

    async def steps(stored: StoredResponses) -> tuple[Holder | None, Holder | None]:
        await stored.remember(rid, MINE)
        await stored.remember(rid, THEIRS)  # a worker claiming the id again moves nothing
        found = await stored.find(rid)
        await stored.forget(rid)
        return found, await stored.find(rid)

    assert _run(redis_server.url, steps) == (MINE, None)


def test_a_holder_expires_with_its_ttl(redis_server: RedisServer, redis_client: redis.Redis) -> None:
    rid = "resp_" + secrets.token_hex(8)

    async def steps(stored: StoredResponses) -> None:
        await stored.remember(rid, MINE)

    _run(redis_server.url, steps)
    ttl = redis_client.pttl(keys.stored_response(rid))
    assert 0 < ttl <= 60_000


@pytest.mark.parametrize("bad", ["bad}id", "{t:team-a}", "x" * 129, "", "a b"])
def test_an_id_that_is_no_id_is_never_a_key(
    redis_server: RedisServer, redis_client: redis.Redis, bad: str
) -> None:
    async def steps(stored: StoredResponses) -> None:
        await stored.remember(bad, MINE)

    _run(redis_server.url, steps)
    assert not redis_client.exists(keys.stored_response(bad))


def test_redis_down_is_a_503_on_reading_and_nothing_on_writing() -> None:
    async def steps(stored: StoredResponses) -> None:
        await stored.remember("resp_1", MINE)  # logged, not raised: the answer still goes out
        await stored.find("resp_1")

    with pytest.raises(GatewayError) as caught:
        _run(f"redis://127.0.0.1:{free_port()}/0", steps)
    assert caught.value.code is ErrorCode.REDIS_UNAVAILABLE


def test_a_holder_keeps_the_conversations_size_and_only_its_writer_resizes_it(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    rid, gone, old = ("resp_" + secrets.token_hex(8) for _ in range(3))
    sized = dataclasses.replace(MINE, tokens=3754)
    # A holder written before holders kept the size: five fields, read as no history.
    redis_client.set(
        keys.stored_response(old), "\x1f".join(("team-a", "m", "alias", "m", "http://10.0.0.1:8000"))
    )

    async def steps(stored: StoredResponses) -> tuple[object, ...]:
        wrote = await stored.remember(rid, sized)
        again = await stored.remember(rid, THEIRS)  # not written: its caller may not resize it
        await stored.resize(rid, dataclasses.replace(sized, tokens=3004))
        await stored.remember(gone, sized)
        await stored.forget(gone)
        await stored.resize(gone, sized)  # deleted meanwhile: stays deleted
        return wrote, again, await stored.find(rid), await stored.find(gone), await stored.find(old)

    assert _run(redis_server.url, steps) == (
        True,
        False,
        dataclasses.replace(MINE, tokens=3004),
        None,
        MINE,  # tokens 0
    )
    assert 0 < redis_client.pttl(keys.stored_response(rid)) <= 60_000  # the resize kept its TTL
