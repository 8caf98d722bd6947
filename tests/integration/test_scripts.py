"""gateway/redis/scripts.py: a script call on one Redis sends EVALSHA on the client's lean
connections (gateway/redis/lean.py); what redis-py's client did around it must still hold: a
script Redis lost (restart, failover, SCRIPT FLUSH) is loaded again, a connection Redis closed is
retried once on a fresh socket, an error in the script is a RedisError and leaves the connection
usable, and a cancelled call leaves no reply behind for the next caller. Every scenario runs on
the gateway's own client (`connect_redis`), on one Redis and on the cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
from redis.exceptions import ResponseError

from gateway.config import Settings
from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.redis.client import RedisClient, close_redis, connect_redis
from gateway.redis.scripts import Script
from tests.redis_cluster import RedisServer

T = TypeVar("T")


def run_with_client(url: str, scenario: Callable[[RedisClient], Awaitable[T]]) -> T:
    async def main() -> T:
        client = connect_redis(Settings(redis_url=url))
        try:
            return await scenario(client)
        finally:
            await close_redis(client)

    return asyncio.run(main())


pytestmark = pytest.mark.also_on_cluster

ECHO = "return {KEYS[1], ARGV[1]}"
KEY = "sg:{t:scripts}:x"


def test_a_script_redis_lost_is_loaded_again(redis_server: RedisServer) -> None:
    async def scenario(redis: RedisClient) -> list[object]:
        script = Script(redis, ECHO)
        first = await script(keys=[KEY], args=["a"])
        await redis.script_flush()
        return [first, await script(keys=[KEY], args=["b"])]

    assert run_with_client(redis_server.url, scenario) == [[KEY.encode(), b"a"], [KEY.encode(), b"b"]]


def test_an_error_in_the_script_is_a_response_error_and_the_next_call_works(
    redis_server: RedisServer,
) -> None:
    async def scenario(redis: RedisClient) -> object:
        failing = Script(redis, "return redis.call('INCR', KEYS[1], 'extra')")
        with pytest.raises(ResponseError):
            await failing(keys=[KEY], args=[])
        return await Script(redis, ECHO)(keys=[KEY], args=["after"])

    assert run_with_client(redis_server.url, scenario) == [KEY.encode(), b"after"]


def test_a_connection_redis_closed_is_retried_on_a_fresh_one() -> None:
    async def main(url: str) -> object:
        redis = connect_redis(Settings(redis_url=url))
        killer = connect_redis(Settings(redis_url=url))
        try:
            script = Script(redis, ECHO)
            await script(keys=[KEY], args=["warm"])
            killed = await killer.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
            assert killed >= 1, "the script's pooled connection was closed by Redis"
            return await script(keys=[KEY], args=["again"])
        finally:
            await close_redis(redis)
            await close_redis(killer)

    with EmbeddedRedis() as server:
        assert asyncio.run(main(server.url)) == [KEY.encode(), b"again"]


def test_a_cancelled_call_leaves_no_reply_for_the_next_caller(redis_server: RedisServer) -> None:
    async def scenario(redis: RedisClient) -> list[object]:
        slow = Script(redis, "redis.call('SET', KEYS[1], ARGV[1]) return ARGV[1]")
        echo = Script(redis, ECHO)
        await slow(keys=[KEY], args=["warm"])
        answers = []
        for n in range(20):
            call = asyncio.ensure_future(slow(keys=[KEY], args=[f"cut{n}"]))
            for _ in range(n % 4):  # cut at different points: before sending, after, mid-read
                await asyncio.sleep(0)
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
            answers.append(await echo(keys=[KEY], args=[f"n{n}"]))
        return answers

    answers = run_with_client(redis_server.url, scenario)
    assert answers == [[KEY.encode(), f"n{n}".encode()] for n in range(20)]
