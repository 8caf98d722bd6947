"""A pool nobody waits in skips its fair-share charges (issue 24): counters only choose between
waiting teams. A replica that knows nothing yet charges; once Redis says no team waited on any
replica within the window it stops, and it charges again as soon as a team waits there, or here."""

from __future__ import annotations

import asyncio
import secrets

from redis.asyncio import Redis

from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.observability.metrics import Metrics
from gateway.redis.breaker import RedisBreaker
from gateway.routing.dispatch import TokenDispatch
from gateway.routing.share import ShareTicket
from gateway.routing.vtc_store import FairShareStore
from tests.waiting import eventually

LONG_WINDOW_S = 600.0  # no test lasts this long: a team that waited stays "waited" throughout


def _ticket(team: str) -> ShareTicket:
    return ShareTicket.estimated(team, 1, 5, 100, 0)


def test_a_pool_nobody_waits_in_skips_its_charges_until_a_team_waits_on_any_replica(
    redis_server: EmbeddedRedis,
) -> None:
    async def main() -> None:
        redis = Redis.from_url(redis_server.url)
        store = FairShareStore(redis, RedisBreaker(1.0), Metrics(), timeout_s=5, window_s=LONG_WINDOW_S)
        pool = "q" + secrets.token_hex(4)
        dispatch = TokenDispatch(
            pool, 10, store.metrics, store, take_slot=lambda: None, release=lambda _: None
        )
        share = dispatch.share
        try:
            first = _ticket("a")
            dispatch.dispatched(first)
            assert first.charges, "a replica that never heard from Redis charges"
            await eventually(lambda: not share._remote_waited, "Redis said nobody waits")

            # Another replica has a team waiting: it says so with its heartbeat.
            reply = await store.call(pool, [("w", "elsewhere", 0.0)], ())
            assert int(reply[-1]) == 1

            second = _ticket("a")
            dispatch.dispatched(second)
            assert not second.charges, "nobody waited when Redis last answered"
            second.settle(100, 0)  # nothing charged, nothing to correct
            # ...but it asked Redis again (once a window), and now knows of the waiter.
            await eventually(lambda: share._remote_waited, "Redis said a team waits")
            third = _ticket("a")
            dispatch.dispatched(third)
            assert third.charges
        finally:
            dispatch.close()
            await redis.aclose()

    asyncio.run(main())


def test_a_team_waiting_here_turns_the_charges_on_at_once(redis_server: EmbeddedRedis) -> None:
    async def main() -> None:
        redis = Redis.from_url(redis_server.url)
        store = FairShareStore(redis, RedisBreaker(1.0), Metrics(), timeout_s=5, window_s=LONG_WINDOW_S)
        pool = "q" + secrets.token_hex(4)
        dispatch = TokenDispatch(
            pool, 10, store.metrics, store, take_slot=lambda: None, release=lambda _: None
        )
        share = dispatch.share
        try:
            dispatch.dispatched(_ticket("a"))
            await eventually(lambda: not share._remote_waited, "Redis said nobody waits")
            quiet = _ticket("a")
            dispatch.dispatched(quiet)
            assert not quiet.charges
            share.backlog_changed("b", 1)  # a team queues here
            share.backlog_changed("b", 0)  # and was served
            busy = _ticket("a")
            dispatch.dispatched(busy)
            assert busy.charges
            # Redis heard of the waiter too ("w"), so other replicas charge again.
            for _ in range(500):
                if int((await store.call(pool, [], ()))[-1]) == 1:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("Redis never heard that a team waited")
        finally:
            dispatch.close()
            await redis.aclose()

    asyncio.run(main())
