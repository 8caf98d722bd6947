"""vtc.lua against a real Redis, through FairShareStore: charges, corrections at settlement, the
lift of a newly backlogged team, weights, priority bands, one team alone, a correction after the
keys expired, and a replica that died with charges never corrected.

Each test uses a pool name of its own, so its keys are its own. Times here are only lower bounds
(a sleep longer than a window makes sure the window passed), never upper ones."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from gateway.errors import ErrorCode, GatewayError, StoreUnavailable
from gateway.limits.spec import NO_LIMITS, LimitSet, parse_limits
from gateway.observability.metrics import Metrics
from gateway.redis import keys
from gateway.redis.breaker import RedisBreaker
from gateway.redis.client import RedisClient, close_redis
from gateway.routing import vtc
from gateway.routing.share import ShareTicket, band, weighted_cost
from gateway.routing.vtc import PoolShare
from gateway.routing.vtc_store import FairShareStore
from tests.redis_cluster import RedisServer, async_client
from tests.waiting import eventually

pytestmark = pytest.mark.also_on_cluster

T = TypeVar("T")
LONG_WINDOW_S = 600.0  # no test lasts this long: every team seen stays active


def _run(url: str, scenario: Callable[[FairShareStore, RedisClient, str], Awaitable[T]], **store: Any) -> T:
    async def main() -> T:
        redis = async_client(url)
        try:
            fair = FairShareStore(redis, RedisBreaker(1.0), Metrics(), timeout_s=5, **store)
            return await scenario(fair, redis, "p" + secrets.token_hex(4))
        finally:
            await close_redis(redis)

    return asyncio.run(main())


def _counters(reply: list[Any]) -> dict[str, float]:
    return {keys.as_text(reply[i]): float(reply[i + 1]) for i in range(1, len(reply) - 1, 2)}


# Both teams active at 0 first: a team charged while another is active would start at its counter.
START = [("b", "a", 0.0), ("b", "b", 0.0)]


async def _stored(redis: RedisClient, pool: str) -> dict[str, float]:
    """The counters (without the reservations, kept in the same hash under "~team")."""
    raw = await redis.hgetall(keys.fair_share(pool)[0])
    return {keys.as_text(k): float(v) for k, v in raw.items() if not keys.as_text(k).startswith("~")}


def test_a_charge_adds_and_a_correction_moves_it_to_the_actual_cost(redis_server: RedisServer) -> None:
    async def scenario(fair: FairShareStore, redis: RedisClient, pool: str) -> None:
        reply = await fair.call(pool, [*START, ("c", "a", 300.0), ("c", "b", 100.0)], ())
        assert reply[0] == 0  # no candidates, no pick
        assert _counters(reply) == {"a": 300.0, "b": 100.0}
        await fair.call(pool, [("s", "a", -120.5)], ())
        assert await _stored(redis, pool) == {"a": 179.5, "b": 100.0}

    _run(redis_server.url, scenario, window_s=LONG_WINDOW_S)


def test_the_least_served_team_is_picked_and_charged(redis_server: RedisServer) -> None:
    async def scenario(fair: FairShareStore, redis: RedisClient, pool: str) -> None:
        await fair.call(pool, [*START, ("c", "a", 500.0), ("c", "b", 200.0)], ())
        reply = await fair.call(pool, [], [("a", 5, 10.0), ("b", 5, 50.0)])
        assert reply[0] == 2  # b, 1-based
        assert _counters(reply) == {"a": 500.0, "b": 250.0}
        # Equal counters: the earlier candidate (the one waiting longer).
        await fair.call(pool, [("c", "b", 250.0)], ())
        assert (await fair.call(pool, [], [("b", 5, 1.0), ("a", 5, 1.0)]))[0] == 1

    _run(redis_server.url, scenario, window_s=LONG_WINDOW_S)


def test_a_newly_backlogged_team_starts_at_the_least_counter_and_idling_earns_nothing(
    redis_server: RedisServer,
) -> None:
    async def scenario(fair: FairShareStore, redis: RedisClient, pool: str) -> None:
        # Served, and settled (a reservation still out counts for nothing here: next test).
        await fair.call(pool, [*START, ("c", "a", 1000.0), ("c", "b", 700.0)], ())
        await fair.call(pool, [("r", "a", 1000.0), ("r", "b", 700.0)], ())
        reply = await fair.call(pool, [("b", "newcomer", 0.0)], ())
        assert _counters(reply)["newcomer"] == 700.0  # not 0: it cannot bank the time it was away
        # With nobody else active, a team keeps its counter (there is no one to be unfair to).
        other = "q" + pool
        alone = await fair.call(other, [("c", "solo", 42.0), ("b", "solo", 0.0)], ())
        assert _counters(alone) == {"solo": 42.0}

    _run(redis_server.url, scenario, window_s=LONG_WINDOW_S)


def test_a_team_back_after_the_window_starts_at_the_least_counter_even_when_it_was_ahead(
    redis_server: RedisServer,
) -> None:
    """A replica died with its requests in flight: their estimates were charged and are never
    corrected. Once the team has been away for the window, that debt is gone, so no counter
    drifts for longer than the window; a correction for a team gone meanwhile is dropped."""

    async def scenario(fair: FairShareStore, redis: RedisClient, pool: str) -> None:
        await fair.call(
            pool, [("b", "dead", 0.0), ("b", "live", 0.0), ("c", "dead", 5000.0), ("c", "live", 100.0)], ()
        )
        await asyncio.sleep(0.3)  # both leave the 0.1 s window
        await fair.call(pool, [("c", "live", 10.0)], ())  # live comes back first
        assert "dead" not in await _stored(redis, pool)
        # A late correction and release: nothing to correct.
        await fair.call(pool, [("s", "dead", -4000.0), ("r", "dead", 5000.0)], ())
        reply = await fair.call(pool, [("b", "dead", 0.0)], ())
        # dead starts where live's settled service is (its 10 is still reserved), not at 5000.
        assert _counters(reply) == {"dead": 0.0, "live": 10.0}

    _run(redis_server.url, scenario, window_s=0.1)


def test_weights_split_the_picks_in_their_ratio(redis_server: RedisServer) -> None:
    async def scenario(fair: FairShareStore, redis: RedisClient, pool: str) -> dict[str, int]:
        picks = {"w1": 0, "w2": 0, "w4": 0}
        costs = {team: weighted_cost(100, 50, int(team[1])) for team in picks}
        for _ in range(700):
            reply = await fair.call(pool, [], [(team, 5, costs[team]) for team in picks])
            picks[list(picks)[int(reply[0]) - 1]] += 1
        return picks

    picks = _run(redis_server.url, scenario, window_s=LONG_WINDOW_S)
    # Service shares 1/7, 2/7, 4/7 of 700 picks of equal requests, within one request.
    for team, share in (("w1", 100), ("w2", 200), ("w4", 400)):
        assert abs(picks[team] - share) <= 1, picks


def test_a_higher_band_goes_first_whatever_its_counter(redis_server: RedisServer) -> None:
    async def scenario(fair: FairShareStore, redis: RedisClient, pool: str) -> None:
        await fair.call(
            pool,
            [("b", "urgent", 0.0), ("b", "batch", 0.0), ("c", "urgent", 9000.0), ("c", "batch", 1.0)],
            (),
        )
        reply = await fair.call(pool, [], [("batch", 5, 1.0), ("urgent", 7, 1.0)])
        assert reply[0] == 2
        # Within the band, the counters decide again.
        reply = await fair.call(pool, [], [("urgent", 7, 1.0), ("batch", 7, 1.0), ("x", 3, 1.0)])
        assert reply[0] == 2

    _run(redis_server.url, scenario, window_s=LONG_WINDOW_S)


def test_a_correction_after_the_keys_expired_changes_nothing(redis_server: RedisServer) -> None:
    async def scenario(fair: FairShareStore, redis: RedisClient, pool: str) -> None:
        await fair.call(pool, [("c", "a", 100.0)], ())
        counters, active, floor = keys.fair_share(pool)
        ttl_ms = await redis.pttl(counters)
        # Set, and at most the 0.2 s asked for (-2: a busy machine let it expire already).
        assert ttl_ms != -1
        assert ttl_ms <= 200
        await asyncio.sleep(0.4)  # past the 0.2 s TTL
        assert await redis.exists(counters, active, floor) == 0
        await fair.call(pool, [("s", "a", -80.0)], ())
        assert await redis.exists(counters, active, floor) == 0  # no negative counter from nothing

    _run(redis_server.url, scenario, window_s=LONG_WINDOW_S, ttl_s=0.2)


def test_the_pool_keys_share_one_hash_tag() -> None:
    for pool in ("m", "model/pool-a", "odd}name{"):
        tags = {key[key.index("{") + 1 : key.index("}")] for key in keys.fair_share(pool)}
        assert len(tags) == 1


def test_a_single_team_is_picked_whatever_its_counter(redis_server: RedisServer) -> None:
    async def scenario(fair: FairShareStore, redis: RedisClient, pool: str) -> None:
        await fair.call(pool, [("c", "a", 1e9), ("c", "b", 0.0)], ())
        assert (await fair.call(pool, [], [("a", 5, 1.0)]))[0] == 1  # work-conserving

    _run(redis_server.url, scenario, window_s=LONG_WINDOW_S)


def test_pool_share_batches_updates_and_picks_through_redis(redis_server: RedisServer) -> None:
    """The Python side: charges and corrections reach Redis in the background; a pick carries
    what is pending; a ticket settled twice corrects once; a retried request's first charge is
    given back whole."""

    async def scenario(fair: FairShareStore, redis: RedisClient, pool: str) -> None:
        share = PoolShare(pool, fair.metrics, fair, lambda: ())
        await fair.call(pool, START, ())
        ticket = ShareTicket.estimated("a", 2, 5, 100, 50)  # (100 + 2 x 50) / 2 = 100
        share.charge("a", ticket.charged(share))
        share.charge("a", ticket.charged(share))  # retried on another endpoint
        share.charge("b", 30.0)
        ticket.settle(40, 10)  # actual (40 + 20) / 2 = 30
        ticket.settle(40, 10)
        # a: 2 x 100 charged, -100 and 30 - 100 corrected: 30, as b. Equal: the first candidate.
        assert await share.pick([("a", 5, 1.0), ("b", 5, 1.0)]) == 0
        assert await _stored(redis, pool) == {"a": 31.0, "b": 30.0}
        assert share.counters == {"a": 31.0, "b": 30.0}
        share.close()

    _run(redis_server.url, scenario, window_s=LONG_WINDOW_S)


@pytest.mark.parametrize(
    ("key", "team", "header", "expected"),
    [
        (None, None, None, 5),
        (None, 8, None, 8),
        (9, 3, None, 3),  # a key cannot outrank its team
        (9, None, None, 5),  # nor a team at the default
        (2, None, None, 2),
        (None, 8, "2", 2),
        (None, 2, "8", 2),  # the header only lowers
        (None, None, "0", 5),
        (None, None, "high", 5),
        (None, None, "\u00b2", 5),  # a digit to str.isdigit, not to int()
    ],
)
def test_the_band_of_a_request(key: int | None, team: int | None, header: str | None, expected: int) -> None:
    assert band(key, team, header) == expected


def test_priority_is_a_limit_of_teams_and_keys_from_1_to_9() -> None:
    team = parse_limits({"priority": 7, "weight": 2}, budgets=True)
    key = parse_limits({"priority": 3}, budgets=False)
    assert (team.priority, key.priority) == (7, 3)
    assert LimitSet.from_json(team.to_json()) == team
    assert team.merged(NO_LIMITS, {"priority"}).priority is None
    assert NO_LIMITS.merged(key, set()).priority == 3
    for bad in (0, 10, "5", True, 2.5):
        with pytest.raises(GatewayError) as refused:
            parse_limits({"priority": bad}, budgets=False)
        assert refused.value.code is ErrorCode.INVALID_REQUEST
        assert refused.value.param == "priority"


def test_the_jain_index_is_over_the_service_the_waiting_teams_got() -> None:
    waiting = {"a", "b"}
    share = PoolShare("p", Metrics(), None, lambda: waiting)
    assert share.jain_index() == 1.0  # nothing served yet
    share.settled("a", 100.0)
    assert share.jain_index() == 0.5  # one of two waiting teams got everything
    share.settled("b", 100.0)
    share.settled("gone", 5000.0)  # not waiting: not counted
    assert share.jain_index() == 1.0
    waiting.discard("b")
    assert share.jain_index() == 1.0  # fewer than two teams wait


def test_a_refund_after_the_window_gives_no_credit_to_a_team_with_a_request_in_flight(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request with a huge estimate (a large max_tokens) runs longer than the active window
    while its team waits for nothing; the team comes back with a new request, then the first
    settles far under its estimate. The refund must land on the counter it was charged to, not
    on a counter lifted meanwhile: else the team owns the pool for the refunded amount."""
    monkeypatch.setattr(vtc, "HEARTBEAT_S", 0.05)

    async def scenario(fair: FairShareStore, redis: RedisClient, pool: str) -> None:
        waiting = {"b"}
        share = PoolShare(pool, fair.metrics, fair, lambda: waiting)
        share.charge("b", 500.0)
        share.correct("b", 0.0, 500.0)  # served, settled at 500
        long_one = ShareTicket.estimated("a", 1, 5, 0, 5000)  # 10000 reserved
        share.charge("a", long_one.charged(share))
        await eventually(lambda: share.counters.get("a") == 10500.0, "a charged in Redis")
        await asyncio.sleep(2.5)  # past the 2 s window; a has nothing waiting all along
        again = ShareTicket.estimated("a", 1, 5, 0, 50)
        share.charge("a", again.charged(share))
        long_one.settle(0, 50)  # used 100 of its 10000
        again.settle(0, 50)
        await eventually(lambda: not share._pending and not share._sending, "sent")
        stored = await _stored(redis, pool)
        assert stored["a"] >= stored["b"], stored  # not 9900 below everyone
        share.close()

    _run(redis_server.url, scenario, window_s=2.0)


def test_a_team_that_waits_again_keeps_its_counter_locally() -> None:
    """The local copy (Redis down, or none) lifts a newly waiting team to the least waiting
    counter, never lowers it there: a heavy team's one waiter served then queued again must
    not start even with a light team."""
    waiting: dict[str, int] = {}
    share = PoolShare("p", Metrics(), None, lambda: list(waiting))

    def backlog(team: str, n: int) -> None:
        if n:
            waiting[team] = n
        else:
            waiting.pop(team, None)
        share.backlog_changed(team, n)

    backlog("heavy", 1)
    backlog("light", 1)
    share.charge("light", 100.0)
    share.charge("heavy", 10_000.0)
    backlog("heavy", 0)  # served
    backlog("heavy", 1)  # and waiting again
    assert share.counters["heavy"] == 10_100.0  # lifted to light's 100 when first charged, kept since
    assert share.local_pick([("heavy", 5, 1.0), ("light", 5, 1.0)]) == 1


def test_team_series_go_when_the_team_stops_waiting_and_counters_do_not_pile_up() -> None:
    metrics = Metrics()
    waiting: dict[str, int] = {}
    share = PoolShare("p", metrics, None, lambda: list(waiting))
    share.backlog_changed("anchor", 1)
    waiting["anchor"] = 1
    share.charge("anchor", 1.0)
    for i in range(200):
        share.charge("anchor", 100.0)  # the least served, served meanwhile
        share.correct("anchor", 0.0, 100.0)
        team = f"t{i}"
        waiting[team] = 1
        share.backlog_changed(team, 1)
        ticket = ShareTicket.estimated(team, 1, 5, 10, 10)
        share.charge(team, ticket.charged(share))
        del waiting[team]
        share.backlog_changed(team, 0)
        ticket.settle(10, 10)
        for name in ("sluicegate_fair_share_backlog", "sluicegate_fair_share_service_tokens"):
            assert metrics.registry.get_sample_value(name, {"pool": "p", "team": team}) is None
    assert len(share.counters) <= 8, len(share.counters)


def test_a_charge_redis_never_got_is_not_refunded_when_it_comes_back(redis_server: RedisServer) -> None:
    """Updates that could not be sent are dropped; the correction of a charge among them must
    not reach Redis as a refund of something it never charged."""

    async def scenario(fair: FairShareStore, redis: RedisClient, pool: str) -> None:
        down = False
        charged: list[str] = []  # teams whose charges Redis applied
        real = fair.call

        async def flaky(pool: str, updates: Any, candidates: Any) -> list[Any]:
            if down:
                raise StoreUnavailable("down")  # as the store fails
            reply = await real(pool, updates, candidates)
            charged.extend(team for kind, team, _ in updates if kind == "c")
            return reply

        fair.call = flaky  # type: ignore[method-assign]
        waiting = {"b"}
        share = PoolShare(pool, fair.metrics, fair, lambda: waiting)
        share.charge("b", 500.0)
        share.correct("b", 0.0, 500.0)  # served, settled at 500
        small = ShareTicket.estimated("a", 1, 5, 100, 0)
        share.charge("a", small.charged(share))
        await eventually(lambda: "a" in charged, "both charged in Redis")
        assert await _stored(redis, pool) == {"a": 600.0, "b": 500.0}
        down = True
        big = ShareTicket.estimated("a", 1, 5, 0, 5000)  # 10000, never reaches Redis
        share.charge("a", big.charged(share))
        await eventually(lambda: not share._pending and not share._sending, "dropped")
        down = False
        big.settle(0, 50)  # -9900 for a charge Redis never made
        await eventually(lambda: not share._pending and not share._sending, "sent")
        await real(pool, [], ())
        stored = await _stored(redis, pool)
        assert stored["a"] >= stored["b"], stored
        small.settle(100, 0)
        share.close()

    _run(redis_server.url, scenario, window_s=LONG_WINDOW_S)


def test_after_an_outage_longer_than_the_window_no_refund_lands_on_a_lifted_counter(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis is unreachable for longer than the window while a request with a huge estimate runs:
    Redis forgets the team (its heartbeats could not arrive) and lifts it when it comes back, so
    the request's refund must not follow it there."""
    monkeypatch.setattr(vtc, "HEARTBEAT_S", 0.05)

    async def scenario(fair: FairShareStore, redis: RedisClient, pool: str) -> None:
        down = False
        charged: list[str] = []
        real = fair.call

        async def flaky(pool: str, updates: Any, candidates: Any) -> list[Any]:
            if down:
                raise StoreUnavailable("down")  # as the store fails
            reply = await real(pool, updates, candidates)
            charged.extend(team for kind, team, _ in updates if kind == "c")
            return reply

        fair.call = flaky  # type: ignore[method-assign]
        waiting = {"b"}
        share = PoolShare(pool, fair.metrics, fair, lambda: waiting)
        share.charge("b", 500.0)
        share.correct("b", 0.0, 500.0)  # served, settled at 500
        big = ShareTicket.estimated("a", 1, 5, 0, 5000)  # 10000
        share.charge("a", big.charged(share))
        await eventually(lambda: "a" in charged, "charged in Redis")
        down = True
        await asyncio.sleep(1.0)  # past the 0.5 s window
        down = False
        charged.clear()
        again = ShareTicket.estimated("a", 1, 5, 0, 50)
        share.charge("a", again.charged(share))  # a is lifted to b's 500 in Redis
        await eventually(lambda: "a" in charged, "charged again")
        big.settle(0, 50)
        await eventually(lambda: not share._pending and not share._sending, "sent")
        await real(pool, [], ())
        stored = await _stored(redis, pool)
        assert stored["a"] >= stored["b"], stored
        again.settle(0, 50)
        share.close()

    _run(redis_server.url, scenario, window_s=0.5)


def test_a_newcomer_is_not_lifted_onto_reservations_that_are_refunded_later(
    redis_server: RedisServer,
) -> None:
    """A team alone holds huge reservations (max_tokens far above what it uses) when another
    becomes backlogged: the newcomer starts at what the team was served, not at the reservations,
    or their refunds would leave the team that far below it (the pool its own for that much)."""

    async def scenario(fair: FairShareStore, redis: RedisClient, pool: str) -> None:
        await fair.call(pool, [("c", "a", 300.0), ("r", "a", 300.0)], ())  # one settled request
        await fair.call(pool, [("c", "a", 1e9)], ())  # then one reserved at 1e9, in flight
        reply = await fair.call(pool, [("b", "newcomer", 0.0)], ())
        assert _counters(reply)["newcomer"] == 300.0
        reply = await fair.call(pool, [("s", "a", 100.0 - 1e9), ("r", "a", 1e9)], ())  # used 100
        counters = _counters(reply)
        assert counters == {"a": 400.0, "newcomer": 300.0}

    _run(redis_server.url, scenario, window_s=LONG_WINDOW_S)
