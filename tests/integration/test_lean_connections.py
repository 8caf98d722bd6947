"""gateway/redis/lean.py against a Redis that misbehaves: a raw server on a loopback socket that
answers redis-py's handshake like Redis, then answers each EVALSHA as the test says (twice, with
bytes that are not RESP, never, or with bytes nobody asked for). Every outcome is read off what
the server saw (connections opened and closed, commands received), never off a duration."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import InvalidResponse, MaxConnectionsError

from gateway.config import Settings
from gateway.redis.client import RedisClient, close_redis, connect_redis
from gateway.redis.scripts import Script
from tests.servers import ScriptedRedisServer

KEY = "sg:{t:lean}:x"


@asynccontextmanager
async def gateway_client(**settings: Any) -> AsyncIterator[tuple[ScriptedRedisServer, Script, RedisClient]]:
    fake = ScriptedRedisServer()
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    redis: RedisClient = connect_redis(Settings(redis_url=f"redis://127.0.0.1:{port}", **settings))
    try:
        yield fake, Script(redis, "return 1"), redis
    finally:
        await close_redis(redis)
        server.close()
        await server.wait_closed()


def test_a_second_reply_to_one_command_closes_the_connection_and_the_first_reply_stands() -> None:
    async def main() -> None:
        async with gateway_client() as (fake, script, _):
            fake.mode = "twice"
            assert await script(keys=[KEY], args=[]) == 1
            await fake.until(lambda: fake.closed == 1)
            fake.mode = "ok"
            assert await script(keys=[KEY], args=[]) == 1
            assert fake.opened == 2

    asyncio.run(main())


def test_a_reply_that_is_not_resp_is_a_redis_error_and_closes_the_connection() -> None:
    async def main() -> None:
        async with gateway_client() as (fake, script, _):
            fake.mode = "garbage"
            with pytest.raises(InvalidResponse):
                await script(keys=[KEY], args=[])
            await fake.until(lambda: fake.closed == 1)
            fake.mode = "ok"
            assert await script(keys=[KEY], args=[]) == 1

    asyncio.run(main())


def test_a_call_cancelled_before_its_reply_closes_its_connection() -> None:
    """A deadline (the callers' asyncio.timeout) cancels the call the same way: its reply, if it
    ever comes, must not be read as the next call's."""

    async def main() -> None:
        async with gateway_client() as (fake, script, _):
            fake.mode = "silent"
            call = asyncio.ensure_future(script(keys=[KEY], args=[]))
            await fake.until(lambda: fake.evalsha == 1)
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
            await fake.until(lambda: fake.closed == 1)
            fake.mode = "ok"
            assert await script(keys=[KEY], args=[]) == 1
            assert fake.opened == 2

    asyncio.run(main())


def test_past_max_connections_a_call_fails_at_once() -> None:
    async def main() -> None:
        async with gateway_client(redis_max_connections=2) as (fake, script, _):
            fake.mode = "silent"
            waiting = [asyncio.ensure_future(script(keys=[KEY], args=[])) for _ in range(2)]
            await fake.until(lambda: fake.evalsha == 2)
            with pytest.raises(MaxConnectionsError):
                await script(keys=[KEY], args=[])
            assert fake.opened == 2
            for call in waiting:
                call.cancel()
            await asyncio.gather(*waiting, return_exceptions=True)
            await fake.until(lambda: fake.closed == 2)
            fake.mode = "ok"
            assert await script(keys=[KEY], args=[]) == 1  # the bound counts open connections only

    asyncio.run(main())


def test_bytes_no_call_asked_for_close_an_idle_connection() -> None:
    async def main() -> None:
        async with gateway_client() as (fake, script, _):
            assert await script(keys=[KEY], args=[]) == 1
            fake.idle_writers.pop().write(b"+UNASKED\r\n")
            await fake.until(lambda: fake.closed == 1)
            assert await script(keys=[KEY], args=[]) == 1
            assert fake.opened == 2

    asyncio.run(main())


def test_the_lean_connections_are_bounded_apart_from_the_pools() -> None:
    """Each side has redis_max_connections (the edge's descriptor budget counts both): a pool
    socket held does not starve the script calls, and script calls held do not starve the rest."""

    async def main() -> None:
        async with gateway_client(redis_max_connections=1) as (fake, script, redis):
            held = asyncio.ensure_future(redis.execute_command("BLPOP", "q", 0))  # the pool's one
            await fake.until(lambda: fake.blocked == 1)
            fake.mode = "silent"
            waiting = asyncio.ensure_future(script(keys=[KEY], args=[]))  # the lean side's one
            await fake.until(lambda: fake.evalsha == 1)
            with pytest.raises(MaxConnectionsError):
                await script(keys=[KEY], args=[])
            with pytest.raises(MaxConnectionsError):
                await redis.execute_command("GET", "x")
            assert fake.opened == 2
            for call in (held, waiting):
                call.cancel()
            await asyncio.gather(held, waiting, return_exceptions=True)

    asyncio.run(main())


def test_a_burst_of_calls_opens_no_more_connections_than_the_bound() -> None:
    """Connections still in their handshake count: 50 calls at once on a fresh client."""

    async def main() -> None:
        async with gateway_client(redis_max_connections=2) as (fake, script, _):
            results = await asyncio.gather(
                *(script(keys=[KEY], args=[]) for _ in range(50)), return_exceptions=True
            )
            assert fake.opened == 2
            assert {type(r) for r in results} <= {int, MaxConnectionsError}
            assert results.count(1) >= 2

    asyncio.run(main())


def test_a_push_frame_before_the_reply_is_skipped() -> None:
    """redis-py's handshake asks for RESP3 and maintenance notices: a push frame is no call's reply."""

    async def main() -> None:
        async with gateway_client() as (fake, script, _):
            fake.mode = "push first"
            assert await script(keys=[KEY], args=["one"]) == 1
            fake.mode = "ok"
            assert await script(keys=[KEY], args=["two"]) == 1
            assert fake.opened == 1
            assert fake.closed == 0

    asyncio.run(main())


def test_a_resp3_false_is_a_reply_not_a_wait_for_more() -> None:
    async def main() -> None:
        async with gateway_client() as (fake, script, _):
            fake.mode = "false"
            assert await script(keys=[KEY], args=[]) is False
            fake.mode = "ok"
            assert await script(keys=[KEY], args=[]) == 1
            assert fake.opened == 1

    asyncio.run(main())


def test_dropping_idle_connections_leaves_a_call_in_flight_alone() -> None:
    """Sentinel's pool disconnects its idle connections when the master moves; a script call in
    flight must not be cut and sent again (the script would run twice)."""

    async def main() -> None:
        async with gateway_client() as (fake, script, redis):
            fake.mode = "silent"
            call = asyncio.ensure_future(script(keys=[KEY], args=[]))
            await fake.until(lambda: fake.evalsha == 1)
            assert isinstance(redis, Redis)
            await redis.connection_pool.disconnect(inuse_connections=False)
            fake.answer_held()
            assert await call == 1
            assert fake.evalsha == 1
            assert fake.closed == 0

    asyncio.run(main())
