"""FairQueue: weighted fair order across teams, FIFO within one, bounded size, timeouts,
cancellation, the offer-then-cancel handover race, bounded state, and a saturated-pool simulation."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import random
import statistics
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from gateway.routing.fairqueue import FairQueue, QueueFull, QueueTimeout

T = TypeVar("T")
Served = tuple[str, int, int]  # (team, index within team, item)
Grant = tuple[float, float]  # (granted at, hold) in simulated slot-times


def _run(scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(scenario())


def _queue(max_size: int = 1000) -> tuple[FairQueue[int], list[int]]:
    orphans: list[int] = []
    return FairQueue[int](max_size, on_orphan=orphans.append), orphans


async def _enqueue(
    queue: FairQueue[int], team: str, count: int, weight: float = 1.0
) -> list[asyncio.Task[Served]]:
    async def one(index: int) -> Served:
        return team, index, await queue.wait(team, weight, 60.0)

    tasks = [asyncio.create_task(one(i)) for i in range(count)]
    await asyncio.sleep(0)  # each task runs up to its await, so they join in creation order
    return tasks


_items = itertools.count()


async def _serve(queue: FairQueue[int], count: int, tasks: list[asyncio.Task[Served]]) -> list[Served]:
    """Offers `count` fresh items and returns who got them, in service order."""
    pending = [t for t in tasks if not t.done()]
    for _ in range(count):
        assert queue.offer(next(_items))
    await asyncio.sleep(0)
    served = [t.result() for t in pending if t.done() and not t.cancelled()]
    assert len(served) == count
    return sorted(served, key=lambda s: s[2])


def test_fifo_within_one_team() -> None:
    async def scenario() -> list[Served]:
        queue, _ = _queue()
        tasks = await _enqueue(queue, "a", 20)
        return await _serve(queue, 20, tasks)

    assert [index for _, index, _ in _run(scenario)] == list(range(20))


def test_equal_weights_alternate_even_when_one_team_queued_ten_times_more_first() -> None:
    async def scenario() -> list[Served]:
        queue, _ = _queue()
        tasks = await _enqueue(queue, "heavy", 100)
        tasks += await _enqueue(queue, "light", 10)
        return await _serve(queue, 20, tasks)

    served = _run(scenario)
    assert [team for team, _, _ in served] == ["heavy", "light"] * 10
    assert [index for team, index, _ in served if team == "light"] == list(range(10))


def test_weight_three_to_one_gets_three_to_one_service() -> None:
    async def scenario() -> list[Served]:
        queue, _ = _queue()
        tasks = await _enqueue(queue, "gold", 60, weight=3.0)
        tasks += await _enqueue(queue, "basic", 60, weight=1.0)
        return await _serve(queue, 40, tasks)

    teams = [team for team, _, _ in _run(scenario)]
    assert 29 <= teams.count("gold") <= 31
    for window in range(0, 40, 4):  # the ratio holds at every scale, not only on average
        assert teams[window : window + 4].count("basic") == 1


def test_heavy_team_delays_a_late_light_waiter_by_at_most_one_slot() -> None:
    async def scenario() -> list[int]:
        queue, _ = _queue()
        tasks = await _enqueue(queue, "heavy", 200)
        positions = []
        for _ in range(5):
            await _serve(queue, 37, tasks)  # virtual time moves on while light is idle
            light = await _enqueue(queue, "light", 1)
            served = await _serve(queue, 3, tasks + light)
            positions.append(next(i for i, (team, _, _) in enumerate(served) if team == "light"))
        return positions

    assert all(position <= 1 for position in _run(scenario))


def test_an_idle_team_gets_no_credit_for_the_past() -> None:
    async def scenario() -> list[Served]:
        queue, _ = _queue()
        tasks = await _enqueue(queue, "busy", 100)
        await _serve(queue, 50, tasks)
        tasks += await _enqueue(queue, "returning", 10)
        return await _serve(queue, 20, tasks)

    teams = [team for team, _, _ in _run(scenario)]
    longest = max(len(list(run)) for _, run in itertools.groupby(teams))
    assert longest == 1, teams


def test_clients_that_gave_up_do_not_push_their_team_back() -> None:
    async def scenario() -> list[Served]:
        queue, _ = _queue()
        tasks = await _enqueue(queue, "busy", 100)
        for _ in range(20):
            quitter = await _enqueue(queue, "flaky", 1)
            quitter[0].cancel()
            await asyncio.gather(*quitter, return_exceptions=True)
        tasks += await _enqueue(queue, "flaky", 1)
        return await _serve(queue, 2, tasks)

    assert "flaky" in [team for team, _, _ in _run(scenario)]


def test_queue_full_at_max_size_and_room_again_after_service() -> None:
    async def scenario() -> None:
        queue, _ = _queue(max_size=3)
        tasks = await _enqueue(queue, "a", 3)
        with pytest.raises(QueueFull):
            await queue.wait("a", 1.0, 60.0)
        assert len(queue) == 3
        assert queue.offer(7)
        more = await _enqueue(queue, "b", 1)
        assert queue.waiting_by_team() == {"a": 2, "b": 1}
        for task in tasks + more:
            task.cancel()
        await asyncio.gather(*tasks, *more, return_exceptions=True)
        assert len(queue) == 0

    _run(scenario)


def test_a_full_queue_gives_a_team_below_its_share_the_place_of_the_crowding_teams_newest() -> None:
    async def scenario() -> None:
        queue, orphans = _queue(max_size=4)
        crowd = await _enqueue(queue, "a", 4)
        newcomers = await _enqueue(queue, "b", 2)
        assert queue.waiting_by_team() == {"a": 2, "b": 2}
        # The crowding team's two newest gave their places up, with QueueFull.
        await asyncio.wait(crowd[2:], timeout=5)
        assert [type(t.exception()) for t in crowd[2:]] == [QueueFull, QueueFull]
        assert not any(t.done() for t in crowd[:2])
        with pytest.raises(QueueFull):  # at its share now
            await queue.wait("b", 1.0, 60.0)
        for _ in range(4):  # the four left are served; the two that gave up hold nothing
            assert queue.offer(next(_items))
        assert queue.offer(next(_items)) is False
        await asyncio.gather(*crowd[:2], *newcomers)
        assert len(queue) == 0
        assert orphans == []

    _run(scenario)


def test_timeout_raises_and_a_later_offer_does_not_serve_the_expired_waiter() -> None:
    async def scenario() -> None:
        queue, orphans = _queue()
        loop = asyncio.get_running_loop()
        began = loop.time()
        with pytest.raises(QueueTimeout):
            await queue.wait("a", 1.0, 0.05)
        assert loop.time() - began >= 0.05
        assert len(queue) == 0
        assert queue.offer(1) is False
        assert orphans == []

    _run(scenario)


def test_cancelling_a_waiter_removes_it_and_offer_skips_it() -> None:
    async def scenario() -> None:
        queue, orphans = _queue()
        first = await _enqueue(queue, "a", 1)
        second = await _enqueue(queue, "b", 1)
        first[0].cancel()
        assert queue.offer(5)  # before the cancelled task has even run its cleanup
        await asyncio.sleep(0)
        assert first[0].cancelled()
        assert second[0].result() == ("b", 0, 5)
        assert len(queue) == 0
        assert queue.waiting_by_team() == {}
        assert queue.offer(6) is False

        third = await _enqueue(queue, "c", 2)
        third[0].cancel()
        await asyncio.sleep(0)
        assert len(queue) == 1
        assert queue.waiting_by_team() == {"c": 1}
        third[1].cancel()
        await asyncio.gather(*third, return_exceptions=True)
        assert orphans == []

    _run(scenario)


def test_offer_then_cancel_before_the_waiter_resumes_gives_the_item_to_on_orphan_once() -> None:
    async def scenario() -> None:
        queue, orphans = _queue()
        tasks = await _enqueue(queue, "a", 2)
        assert queue.offer(42)
        tasks[0].cancel()  # the future already holds 42, the task has not resumed yet
        results = await asyncio.gather(*tasks[:1], return_exceptions=True)
        assert isinstance(results[0], asyncio.CancelledError)
        assert orphans == [42]
        assert len(queue) == 1  # the other waiter is untouched and gets the next item
        assert queue.offer(43)
        assert await tasks[1] == ("a", 1, 43)
        assert orphans == [42]

    _run(scenario)


def test_offer_with_nobody_waiting_returns_false() -> None:
    queue, orphans = _queue()
    assert queue.offer(1) is False
    assert len(queue) == 0
    assert orphans == []


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="max_size"):
        _queue(max_size=-1)

    async def scenario() -> None:
        queue, _ = _queue()
        for weight in (0.0, -1.0, float("inf"), float("nan")):
            with pytest.raises(ValueError, match="weight"):
                await queue.wait("a", weight, 1.0)
        assert len(queue) == 0

    _run(scenario)


def test_per_team_state_stays_bounded_under_churn() -> None:
    async def scenario() -> tuple[int, int, int]:
        queue, _ = _queue()
        background = await _enqueue(queue, "background", 500)
        rng = random.Random(7)
        for round_ in range(400):
            team = f"t{round_}"
            churn = await _enqueue(queue, team, rng.randint(1, 3), weight=rng.choice([0.5, 1.0, 4.0]))
            if rng.random() < 0.5:
                churn[-1].cancel()
            await _serve(queue, 1, background + churn)
            await _serve(queue, 1, background + churn)
            for task in churn:
                task.cancel()
            await asyncio.gather(*churn, return_exceptions=True)
        sizes = (len(queue._last), len(queue._idle), len(queue._heap))
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        # Once nobody waits, nothing of the past may linger.
        assert (queue._last, queue._idle, queue._heap, queue._vtime) == ({}, [], [], 0.0)
        return sizes

    last, idle, heap = _run(scenario)
    assert last <= 10
    assert idle <= 80
    assert heap <= 2 * 500 + 64


def test_every_offered_item_is_returned_or_orphaned_exactly_once() -> None:
    # No wall clock anywhere: a 0 s timeout fires on the next loop turn, so the interleaving of
    # offers, cancellations and timeouts (and thus every race) is fixed by the seed.
    async def scenario() -> tuple[list[int], list[int], list[int], int, int]:
        queue, orphans = _queue(max_size=50)
        rng = random.Random(3)
        returned: list[int] = []
        handed: list[int] = []
        timeouts = 0

        async def client(team: str, patience: float) -> None:
            nonlocal timeouts
            with contextlib.suppress(QueueFull):
                try:
                    returned.append(await queue.wait(team, rng.choice([1.0, 2.0]), patience))
                except QueueTimeout:
                    timeouts += 1

        tasks: list[asyncio.Task[None]] = []
        for item in range(3000):
            roll = rng.random()
            if roll < 0.5:
                patience = 0.0 if rng.random() < 0.3 else 1e6
                tasks.append(asyncio.create_task(client(rng.choice("abc"), patience)))
            elif roll < 0.6 and tasks:
                rng.choice(tasks).cancel()
            elif queue.offer(item):
                handed.append(item)
            for _ in range(rng.choice([0, 1, 1, 2])):
                await asyncio.sleep(0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return handed, returned, orphans, timeouts, len(queue)

    handed, returned, orphans, timeouts, left = _run(scenario)
    assert left == 0
    assert sorted(returned + orphans) == handed  # nothing lost, nothing handed out twice
    assert len(orphans) >= 10, "the handover race barely happened; the test would prove little"
    assert timeouts >= 50
    assert len(returned) >= 500


def test_cancelled_waiters_do_not_pile_up_in_the_heap() -> None:
    async def scenario() -> tuple[int, int]:
        queue, _ = _queue()
        background = await _enqueue(queue, "background", 100)
        for round_ in range(400):
            # A tiny weight puts these far behind the background, where offer() would not reach them.
            doomed = await _enqueue(queue, f"t{round_}", 3, weight=0.01)
            for task in doomed:
                task.cancel()
            await asyncio.gather(*doomed, return_exceptions=True)
            background += await _enqueue(queue, "background", 1)
            await _serve(queue, 1, background)
        sizes = len(queue), len(queue._heap)
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        return sizes

    live, heap = _run(scenario)
    assert live == 100
    assert heap <= 2 * live + 64


async def _simulate_pool(light_rate: float, heavy_rate: float, *, one_team: bool = False) -> list[float]:
    """A pool of 8 slots (mean hold: 1 slot-time) fed by Poisson arrivals in simulated time, where a
    request takes a free slot or waits in the queue and a released slot goes to offer(); returns the
    light team's latencies (queue wait + hold) in slot-times. `one_team` files everyone under one
    team, which makes the queue plain FIFO: the control that shows the measurement can fail."""
    rng = random.Random(11)
    orphans: list[Grant] = []
    queue = FairQueue[Grant](100_000, on_orphan=orphans.append)
    events: list[tuple[float, int, str]] = []
    seq = itertools.count()
    for team, rate in (("light", light_rate), ("heavy", heavy_rate)):
        now = 0.0
        while rate and now < 200:
            now += rng.expovariate(rate)
            heapq.heappush(events, (now, next(seq), team))
    free = 8
    latencies: list[float] = []
    tasks: list[asyncio.Task[None]] = []

    async def request(team: str, arrived: float) -> None:
        granted, hold = await queue.wait("all" if one_team else team, 1.0, 1e9)
        if team == "light":
            latencies.append(granted + hold - arrived)

    while events:
        now, _, kind = heapq.heappop(events)
        if kind == "release":
            hold = rng.expovariate(1.0)
            if queue.offer((now, hold)):
                heapq.heappush(events, (now + hold, next(seq), "release"))
            else:
                free += 1
        elif free:
            free -= 1
            hold = rng.expovariate(1.0)
            heapq.heappush(events, (now + hold, next(seq), "release"))
            if kind == "light":
                latencies.append(hold)
        else:
            tasks.append(asyncio.create_task(request(kind, now)))
            await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert not orphans
    assert len(queue) == 0
    return latencies


def test_simulated_saturated_pool_keeps_the_light_team_within_2x_of_its_wait_alone() -> None:
    # Light asks for 1/8 of the pool; heavy for 10x that, so together they overload it (11 > 8).
    alone = _run(lambda: _simulate_pool(1.0, 0.0))
    shared = _run(lambda: _simulate_pool(1.0, 10.0))
    fifo = _run(lambda: _simulate_pool(1.0, 10.0, one_team=True))
    assert len(alone) > 150
    assert len(shared) > 150
    p50_alone, p50_shared = statistics.median(alone), statistics.median(shared)
    assert p50_shared <= 2 * p50_alone, (p50_alone, p50_shared)
    assert statistics.mean(shared) <= 2 * statistics.mean(alone)
    # Without fair order the same load makes the light team wait behind heavy's whole backlog.
    assert statistics.median(fifo) > 10 * p50_alone
