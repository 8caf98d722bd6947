"""An open Redis breaker lets one lookup of a never-seen key probe Redis (gateway/redis/breaker.py).

Without the probe, one slow reply on a busy machine opened the breaker and every key the replica had
not cached yet got a 503 for the whole cool-down while Redis answered fine (a coding agent's first
turn failed that way in CI). The cool-downs here are far longer than any test, so nothing depends on
how fast the machine is: what is proven is who reaches Redis, shown by a server that saw the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from starlette.datastructures import Headers

from gateway.config import Settings
from gateway.errors import ErrorCode, GatewayError
from gateway.keys.auth import Authenticator
from gateway.keys.store import KeyStore
from gateway.redis.breaker import FAILURES_TO_OPEN, RedisBreaker
from gateway.redis.client import RedisClient, close_redis, connect_redis
from tests.redis_cluster import RedisServer, run_with_client

LONG_S = 3600.0


def _headers(secret: str) -> Headers:
    return Headers({"authorization": f"Bearer {secret}"})


def test_an_open_breaker_lets_a_new_key_probe_and_an_answer_closes_it(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(redis: RedisClient) -> None:
        store = KeyStore(redis)
        team = "bp" + secrets.token_hex(4)
        await store.create_team(team)
        _, secret = await store.create_key(team)
        breaker = RedisBreaker(LONG_S)
        auth = Authenticator(KeyStore(redis, breaker=breaker), cache_ttl_s=60.0, timeout_s=30.0)
        with caplog.at_level(logging.WARNING, "sluicegate.redis"):
            for _ in range(FAILURES_TO_OPEN + 1):
                breaker.failed("admission", TimeoutError(), time.monotonic())
        assert breaker.open
        assert [r.getMessage() for r in caplog.records if r.name == "sluicegate.redis"] == [
            f"redis breaker open for {LONG_S:.1f}s: admission failed "
            f"(TimeoutError; {FAILURES_TO_OPEN} in a row)"
        ], "one line per opening, naming the call and the error's class only"

        principal = await auth.authenticate(_headers(secret))

        assert principal.team_id
        assert not breaker.open, "Redis answered the probe: the breaker closes"

    run_with_client(redis_server.url, scenario)


@asynccontextmanager
async def _silent_redis() -> AsyncIterator[tuple[str, asyncio.Queue[None]]]:
    """A server that accepts and reads but never answers: a stalled Redis. Each connection that
    sends something puts one item on the queue."""
    heard: asyncio.Queue[None] = asyncio.Queue()
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            if await reader.read(1):
                heard.put_nowait(None)
            await reader.read()  # until the client goes
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"redis://127.0.0.1:{port}/0", heard
    finally:
        server.close()
        for writer in writers:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        await server.wait_closed()


def test_while_redis_stalls_one_new_key_probes_and_the_others_are_refused_at_once() -> None:
    async def main() -> None:
        clients: list[RedisClient] = []
        try:
            # The stalled server goes first: its connections end, so no lookup outlives the test.
            async with _silent_redis() as (url, heard):
                redis = connect_redis(Settings(redis_url=url, redis_timeout_s=LONG_S))
                clients.append(redis)
                breaker = RedisBreaker(LONG_S, failures_to_open=1)
                auth = Authenticator(KeyStore(redis, breaker=breaker), cache_ttl_s=60.0, timeout_s=LONG_S)
                breaker.failed("admission", TimeoutError(), time.monotonic())

                probe = asyncio.ensure_future(auth.authenticate(_headers("sk-first-" + "a" * 40)))
                await asyncio.wait_for(heard.get(), 60)  # the probe's lookup reached the stalled Redis
                for n in range(5):
                    with pytest.raises(GatewayError) as refused:
                        await auth.authenticate(_headers(f"sk-other{n}-" + "b" * 40))
                    assert refused.value.code is ErrorCode.REDIS_UNAVAILABLE
                assert not probe.done(), "the others were refused while the probe still waited"
                assert heard.empty(), "only the probe reached Redis"

                probe.cancel()
                await asyncio.gather(probe, return_exceptions=True)
                assert breaker.open, "no answer came: the breaker stays open"
                again = asyncio.ensure_future(auth.authenticate(_headers("sk-third-" + "c" * 40)))
                await asyncio.wait_for(heard.get(), 60)  # the cancelled probe handed its turn on
                again.cancel()
                await asyncio.gather(again, return_exceptions=True)
        finally:
            for client in clients:
                await close_redis(client)

    asyncio.run(main())
