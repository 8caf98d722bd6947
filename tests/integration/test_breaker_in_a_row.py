"""The Redis breaker opens on failures in a row, not on one late reply (gateway/redis/breaker.py).

One slow reply on a saturated loop opened it for every key (seen at a 5,000-stream ramp, and as CI's
one red run). Admission, the gateway's own RateLimiter on its own Redis client, against a scripted
Redis on a real socket that holds EVALSHA replies (a stall) or answers them as admit.lua would. Who
reaches Redis is read off the server's own count of EVALSHAs, never off a clock: the replies held
back always miss the (short) timeout, and the cool-down is far longer than any test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from gateway.config import Settings
from gateway.errors import GatewayError
from gateway.limits.admission import Admission, Limit, LimitKind, Reservation
from gateway.limits.limit_store import LimitStore
from gateway.limits.limiter import RateLimiter
from gateway.metering.meter import Meter
from gateway.metering.usage_store import UsageStore
from gateway.observability.metrics import Metrics
from gateway.redis import keys as redis_keys
from gateway.redis.breaker import FAILURES_TO_OPEN, RedisBreaker
from gateway.redis.client import close_redis, connect_redis
from tests.servers import ScriptedRedisServer

LONG_S = 3600.0
TIMEOUT_S = 0.2  # only ever waited out for replies the server holds back: never a race
# admit.lua's reply for one request limit: allowed, no refusal, 0 tokens, no bound; then the
# limit's remaining, reset and retry times.
ADMITTED = b"*7\r\n:1\r\n:0\r\n:0\r\n:0\r\n:9\r\n$1\r\n0\r\n$1\r\n0\r\n"
LIMIT = Limit(LimitKind.REQUESTS, redis_keys.rate_limit("b", "k:rpm"), 10, "key k requests per minute")


@asynccontextmanager
async def _limiter() -> AsyncIterator[
    tuple[ScriptedRedisServer, RedisBreaker, Callable[[], Awaitable[bool]]]
]:
    fake = ScriptedRedisServer()
    fake.reply = ADMITTED
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    redis = connect_redis(Settings(redis_url=f"redis://127.0.0.1:{port}", redis_timeout_s=TIMEOUT_S))
    breaker = RedisBreaker(LONG_S)
    meter = Meter(UsageStore(redis, timeout_s=TIMEOUT_S), Metrics())
    limiter = RateLimiter(LimitStore(redis, breaker, timeout_s=TIMEOUT_S), Metrics(), meter)
    count = 0

    async def admit() -> bool:
        """True when admitted, False when refused for Redis (fail closed)."""
        nonlocal count
        count += 1
        try:
            admission: Admission = await limiter.admit("b", [LIMIT], f"r{count}", Reservation(1, 1))
        except GatewayError:
            return False
        return admission.allowed

    try:
        yield fake, breaker, admit
    finally:
        fake.answer_held()
        await limiter.aclose()
        await close_redis(redis)
        server.close()
        await server.wait_closed()


def test_one_late_reply_does_not_open_the_breaker() -> None:
    async def main() -> None:
        async with _limiter() as (fake, breaker, admit):
            assert await admit()
            fake.mode = "silent"  # this one reply comes too late
            assert not await admit()
            fake.mode = "ok"
            assert not breaker.open
            assert await admit(), "the next request reached Redis and was admitted"
            assert fake.evalsha == 3

    asyncio.run(main())


def test_many_replies_late_at_once_are_one_failure() -> None:
    """A saturated loop reads every reply out at that moment late: one failure, not forty."""

    async def main() -> None:
        async with _limiter() as (fake, breaker, admit):
            fake.mode = "silent"
            refused = await asyncio.gather(*(admit() for _ in range(40)))
            assert not any(refused)
            assert fake.evalsha == 40
            fake.mode = "ok"
            assert not breaker.open
            assert await admit()
            assert fake.evalsha == 41

    asyncio.run(main())


def test_a_real_outage_still_opens_it() -> None:
    async def main() -> None:
        async with _limiter() as (fake, breaker, admit):
            fake.mode = "silent"  # Redis stalls, and stays stalled
            for _ in range(FAILURES_TO_OPEN):
                assert not await admit()
            assert breaker.open
            assert fake.evalsha == FAILURES_TO_OPEN
            for _ in range(5):  # refused at once: no request waits out another timeout
                assert not await admit()
            assert fake.evalsha == FAILURES_TO_OPEN

    asyncio.run(main())


def test_an_answer_between_two_late_replies_breaks_the_row() -> None:
    async def main() -> None:
        async with _limiter() as (fake, breaker, admit):
            for _ in range(FAILURES_TO_OPEN):
                fake.mode = "silent"
                assert not await admit()
                fake.mode = "ok"
                assert await admit()
            assert not breaker.open
            assert fake.evalsha == 2 * FAILURES_TO_OPEN

    asyncio.run(main())
