"""A pool with `fairness: tokens`, in process, with its counters in a real Redis (or a Redis that is
gone): who gets a freed slot, one team alone, priority bands, a waiter that leaves during the pick,
Redis down, and the request-count baseline still selectable."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import secrets
import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
from redis.asyncio import Redis

from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.errors import ConfigError
from gateway.model_file import parse_model_table
from gateway.model_table import ModelConfig, RoutingConfig
from gateway.observability.metrics import Metrics
from gateway.redis.breaker import RedisBreaker
from gateway.routing.endpoint import Endpoint
from gateway.routing.fairqueue import FairQueue
from gateway.routing.policy import RouteRequest
from gateway.routing.pool import Pool
from gateway.routing.share import ShareTicket
from gateway.routing.tokenqueue import TokenQueue
from gateway.routing.vtc_store import FairShareStore
from tests.servers import free_port
from tests.waiting import eventually

T = TypeVar("T")


def _pool(
    metrics: Metrics, store: FairShareStore | None, *, slots: int = 1, fairness: str = "tokens"
) -> Pool:
    routing = RoutingConfig(
        max_inflight_per_endpoint=slots, max_queue=100, max_queue_wait=30, fairness=fairness
    )
    name = "m" + secrets.token_hex(4)  # its own Redis keys
    model = ModelConfig(name=name, endpoints=("http://w1",), routing=routing)
    return Pool(model, model.pool_configs()[0], metrics, rng=random.Random(0), fair_share=store)


def _run(url: str, scenario: Callable[[Pool, Metrics], Awaitable[T]], *, slots: int = 1) -> T:
    async def main() -> T:
        redis = Redis.from_url(url)
        metrics = Metrics()
        store = FairShareStore(redis, RedisBreaker(1.0), metrics, timeout_s=5)
        pool = _pool(metrics, store, slots=slots)
        try:
            return await scenario(pool, metrics)
        finally:
            pool.close()
            await redis.aclose()

    return asyncio.run(main())


def _route(
    team: str, prompt: int = 100, completion: int = 100, weight: int = 1, band: int = 5
) -> RouteRequest:
    return RouteRequest("m", team=team, share=ShareTicket.estimated(team, weight, band, prompt, completion))


async def _serve_in_order(pool: Pool, routes: list[RouteRequest]) -> list[str]:
    """Takes the one slot, queues `routes` (in this order), then frees the slot once per request
    and records whose request got it; each is settled at its estimate right away."""
    held = pool.try_acquire(_route("holder"), random.Random(0))
    assert held is not None
    order: list[str] = []

    async def one(route: RouteRequest) -> None:
        endpoint, _ = await pool.acquire(route, random.Random(0), (), 30)
        order.append(route.team)
        pool.release(endpoint)

    tasks = []
    for route in routes:
        tasks.append(asyncio.create_task(one(route)))
        await asyncio.sleep(0)  # queued in this order
    pool.release(held[0])
    await asyncio.wait_for(asyncio.gather(*tasks), 30)
    return order


def test_a_freed_slot_goes_to_the_team_with_the_least_weighted_service(redis_server: EmbeddedRedis) -> None:
    async def scenario(pool: Pool, metrics: Metrics) -> list[str]:
        heavy = [_route("heavy", prompt=4000) for _ in range(6)]
        light = [_route("light") for _ in range(6)]
        return await _serve_in_order(pool, [*heavy, *light])

    order = _run(redis_server.url, scenario)
    # heavy's requests cost 4300, light's 300: light gets most of its requests in first,
    # however long it queued behind heavy.
    assert order[:2].count("light") >= 1
    assert order.index("heavy", 1) > order.index("light")
    assert order[-1] == "heavy"
    assert sorted(order) == ["heavy"] * 6 + ["light"] * 6


def test_one_team_alone_gets_every_slot_without_asking_redis(redis_server: EmbeddedRedis) -> None:
    async def scenario(pool: Pool, metrics: Metrics) -> tuple[int, float]:
        got = [pool.try_acquire(_route("solo"), random.Random(0)) for _ in range(4)]
        assert all(g is not None for g in got)
        assert pool.try_acquire(_route("solo"), random.Random(0)) is None  # full
        return pool.endpoints[0].inflight, metrics.registry.get_sample_value(
            "sluicegate_fair_share_fallbacks_total", {"pool": pool.name, "op": "pick"}
        ) or 0.0

    inflight, fallbacks = _run(redis_server.url, scenario, slots=4)
    assert inflight == 4
    assert fallbacks == 0


def test_a_higher_band_is_served_first(redis_server: EmbeddedRedis) -> None:
    async def scenario(pool: Pool, metrics: Metrics) -> list[str]:
        routes = [_route("low", prompt=1, completion=1, band=3) for _ in range(3)]
        routes += [_route("high", prompt=9000, band=7) for _ in range(3)]
        return await _serve_in_order(pool, routes)

    assert _run(redis_server.url, scenario) == ["high"] * 3 + ["low"] * 3


def test_a_waiter_that_leaves_during_the_pick_loses_no_slot(redis_server: EmbeddedRedis) -> None:
    async def scenario(pool: Pool, metrics: Metrics) -> tuple[int, str]:
        rng = random.Random(0)
        held = pool.try_acquire(_route("holder"), rng)
        assert held is not None
        leaving = asyncio.create_task(pool.acquire(_route("a"), rng, (), 30))
        await asyncio.sleep(0)
        staying = asyncio.create_task(pool.acquire(_route("b", prompt=50_000), rng, (), 30))
        await asyncio.sleep(0)
        # b's arrival made two teams wait: Redis is asked which goes next, ahead of a free slot.
        pool.release(held[0])  # the freed slot waits for that answer
        leaving.cancel()  # before it comes back (a, the cheaper, is likely the one chosen)
        endpoint, _ = await asyncio.wait_for(staying, 30)
        assert endpoint.inflight == 1
        pool.release(endpoint)
        return endpoint.inflight, "ok"

    assert _run(redis_server.url, scenario) == (0, "ok")


def test_a_higher_band_goes_before_a_waiter_chosen_ahead(redis_server: EmbeddedRedis) -> None:
    async def scenario(pool: Pool, metrics: Metrics) -> list[str]:
        rng = random.Random(0)
        held = pool.try_acquire(_route("holder"), rng)
        assert held is not None
        order: list[str] = []

        async def one(route: RouteRequest) -> None:
            endpoint, _ = await pool.acquire(route, rng, (), 30)
            order.append(route.team)
            pool.release(endpoint)

        tasks = [asyncio.create_task(one(_route(team))) for team in ("a", "b")]
        await eventually(
            lambda: pool.tokens is not None and pool.tokens.chosen_ahead(), "a waiter chosen ahead"
        )
        tasks.append(asyncio.create_task(one(_route("urgent", band=8))))
        await asyncio.sleep(0)
        pool.release(held[0])
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        return order

    assert _run(redis_server.url, scenario)[0] == "urgent"


def test_without_redis_the_pool_goes_on_with_its_own_counters() -> None:
    async def main() -> tuple[list[str], float, int]:
        redis = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")  # nobody listens there
        metrics = Metrics()
        pool = _pool(metrics, FairShareStore(redis, RedisBreaker(5.0), metrics, timeout_s=1))
        try:
            heavy = [_route("heavy", prompt=4000) for _ in range(4)]
            light = [_route("light") for _ in range(4)]
            order = await _serve_in_order(pool, [*heavy, *light])
            picks = metrics.registry.get_sample_value(
                "sluicegate_fair_share_fallbacks_total", {"pool": pool.name, "op": "pick"}
            )
            return order, picks or 0.0, pool.endpoints[0].inflight
        finally:
            pool.close()
            await redis.aclose()

    order, fallbacks, inflight = asyncio.run(main())
    assert sorted(order) == ["heavy"] * 4 + ["light"] * 4
    assert order.index("light") < 3  # still by tokens, locally
    assert fallbacks >= 1
    assert inflight == 0


def test_a_paused_redis_costs_a_timeout_then_the_pool_goes_on_locally() -> None:
    """Redis stops answering (SIGSTOP) while several teams wait: the pick in flight times out, the
    pool chooses locally from then on, and every request is served on the one slot."""

    async def main(server: EmbeddedRedis) -> tuple[list[str], float, int]:
        redis = Redis.from_url(server.url)
        metrics = Metrics()
        pool = _pool(metrics, FairShareStore(redis, RedisBreaker(30.0), metrics, timeout_s=0.2))
        try:
            await redis.ping()  # connected before the pause
            os.kill(server.pid, signal.SIGSTOP)
            routes = [_route("heavy", prompt=4000) for _ in range(3)] + [_route("light") for _ in range(3)]
            order = await _serve_in_order(pool, routes)
            picks = metrics.registry.get_sample_value(
                "sluicegate_fair_share_fallbacks_total", {"pool": pool.name, "op": "pick"}
            )
            return order, picks or 0.0, pool.endpoints[0].inflight
        finally:
            os.kill(server.pid, signal.SIGCONT)
            pool.close()
            await redis.aclose()

    with EmbeddedRedis() as server:
        order, fallbacks, inflight = asyncio.run(main(server))
    assert sorted(order) == ["heavy"] * 3 + ["light"] * 3
    assert fallbacks >= 1
    assert inflight == 0


def test_requests_fairness_keeps_the_request_count_queue() -> None:
    pool = _pool(Metrics(), None, fairness="requests")
    assert isinstance(pool.queue, FairQueue)
    assert pool.tokens is None
    assert isinstance(_pool(Metrics(), None).queue, TokenQueue)


def test_an_endpoint_slot_count_is_exact_after_a_burst(redis_server: EmbeddedRedis) -> None:
    """Many teams, several slots, random service: every slot comes back, every request served."""

    async def scenario(pool: Pool, metrics: Metrics) -> tuple[int, int]:
        rng = random.Random(1)
        served = 0

        async def one(team: str) -> None:
            nonlocal served
            route = _route(team, prompt=rng.randrange(1, 2000))
            got = pool.try_acquire(route, rng) or await pool.acquire(route, rng, (), 30)
            await asyncio.sleep(0)
            served += 1
            pool.release(got[0])

        await asyncio.wait_for(asyncio.gather(*(one(f"t{i % 5}") for i in range(90))), 60)
        endpoint: Endpoint = pool.endpoints[0]
        return served, endpoint.inflight

    assert _run(redis_server.url, scenario, slots=3) == (90, 0)


def test_the_model_table_takes_fairness_tokens_or_requests() -> None:
    def routing(fairness: str | None) -> RoutingConfig:
        extra = {} if fairness is None else {"fairness": fairness}
        table = parse_model_table(
            {"models": [{"name": "m", "endpoints": [{"url": "http://w"}], "routing": extra}]}
        )
        return table.models[0].routing

    assert routing(None).fairness == "tokens"
    assert routing("requests").fairness == "requests"
    with pytest.raises(ConfigError, match="fairness"):
        routing("tokenz")


def test_the_queue_forgets_teams_that_stopped_waiting_while_the_band_stays_busy() -> None:
    async def main() -> int:
        pool = _pool(Metrics(), None)
        rng = random.Random(0)
        held = pool.try_acquire(_route("holder"), rng)
        assert held is not None
        anchor = asyncio.create_task(pool.acquire(_route("anchor", band=5), rng, (), 30))
        await asyncio.sleep(0)
        for i in range(100):
            passing = asyncio.create_task(pool.acquire(_route(f"t{i}", band=5), rng, (), 30))
            await asyncio.sleep(0)
            passing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await passing
        queue = pool.queue
        assert isinstance(queue, TokenQueue)
        queue.candidates()
        teams = sum(len(fifos) for fifos in queue._bands.values())
        anchor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await anchor
        pool.close()
        return teams

    assert asyncio.run(main()) <= 2


def test_a_slot_freed_during_a_pick_cut_short_by_shutdown_still_goes_to_a_waiter() -> None:
    """The app stops (attach(None)) while a pick is in flight and the slot it was for is free:
    the waiters get it locally, without waiting for another request to end."""

    class Hanging(FairShareStore):
        def __init__(self, metrics: Metrics) -> None:
            self.metrics, self.timeout_s, self.breaker = metrics, 60.0, RedisBreaker(1.0)
            self.window_s = 5.0

        async def call(self, pool: str, updates: object, candidates: object) -> list[object]:
            await asyncio.Event().wait()
            return []

    async def main() -> int:
        metrics = Metrics()
        pool = _pool(metrics, Hanging(metrics))
        rng = random.Random(0)
        held = pool.try_acquire(_route("holder"), rng)
        assert held is not None

        async def one(team: str) -> None:
            endpoint, _ = await pool.acquire(_route(team), rng, (), 30)
            pool.release(endpoint)

        tasks = [asyncio.create_task(one(team)) for team in ("a", "b")]
        await eventually(lambda: len(pool.queue) == 2, "both waiting")
        pool.release(held[0])  # the pick hangs: the slot waits for it
        await asyncio.gather(*pool.attach(None), return_exceptions=True)
        await eventually(lambda: all(t.done() for t in tasks), "both served", within=20)
        pool.close()
        return pool.endpoints[0].inflight

    assert asyncio.run(main()) == 0


def test_a_pick_for_a_waiter_that_left_is_given_back_when_the_queue_empties(
    redis_server: EmbeddedRedis,
) -> None:
    async def scenario(pool: Pool, metrics: Metrics) -> dict[str, float]:
        rng = random.Random(0)
        held = pool.try_acquire(_route("holder"), rng)
        assert held is not None
        waiters = [asyncio.create_task(pool.acquire(_route(team), rng, (), 30)) for team in ("a", "b")]
        tokens = pool.tokens
        assert tokens is not None
        await eventually(tokens.chosen_ahead, "a waiter chosen ahead")
        for task in waiters:
            task.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        pool.release(held[0])
        share = tokens.share
        await eventually(lambda: not share._pending and not share._sending, "sent")
        await eventually(lambda: not tokens.chosen_ahead(), "the choice dropped")
        redis = Redis.from_url(redis_server.url)
        try:
            store = FairShareStore(redis, RedisBreaker(1.0), metrics, timeout_s=5)
            reply = await store.call(pool.name, [], ())
        finally:
            await redis.aclose()
        # The pairs, then whether a team waited (vtc.lua).
        return {k.decode(): float(v) for k, v in zip(reply[1:-1:2], reply[2:-1:2], strict=True)}

    counters = _run(redis_server.url, scenario)
    assert counters["a"] == counters["b"], counters  # nobody served: the pick's charge given back
