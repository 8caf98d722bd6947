"""The token queue's deadline parts, in process (gateway/routing/tokenqueue.py, deadline.py): the
order within a team, how many waiters the estimate puts ahead of a request, which waiters the
re-check refuses, and the header's rules."""

from __future__ import annotations

import asyncio
import math

import pytest

from gateway.errors import ErrorCode, GatewayError
from gateway.routing.deadline import DEADLINE_HEADER, deadline_ms, wait_estimate
from gateway.routing.fairqueue import DeadlineUnreachable
from gateway.routing.share import ShareTicket
from gateway.routing.tokenqueue import TokenQueue


def _queue() -> TokenQueue[str]:
    return TokenQueue(100, on_orphan=lambda item: None, on_backlog=lambda team, n: None)


def _ticket(team: str, deadline: float | None = None, *, band: int = 5, weight: int = 1) -> ShareTicket:
    return ShareTicket(team, weight, band, deadline=deadline)


async def _settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def test_a_team_is_served_earliest_deadline_first_and_no_deadline_last() -> None:
    async def main() -> list[str]:
        queue = _queue()
        tickets = {"none": _ticket("a"), "late": _ticket("a", 200.0), "soon": _ticket("a", 100.0)}
        tasks = {name: asyncio.create_task(queue.wait(t, 60)) for name, t in tickets.items()}
        await _settle()
        served = []
        for i in range(3):
            waiter = queue.offer(f"slot{i}", None, lambda heads: 0)
            assert waiter is not None
            served.append(next(name for name, t in tickets.items() if t is waiter.ticket))
        await asyncio.gather(*tasks.values())
        return served

    assert asyncio.run(main()) == ["soon", "late", "none"]


def test_ahead_counts_higher_bands_its_own_earlier_deadlines_and_other_teams_by_weight() -> None:
    async def main() -> list[int]:
        queue = _queue()
        waiting = [
            _ticket("a", 10.0),
            _ticket("a", 30.0),
            _ticket("a"),
            _ticket("b", weight=2),
            _ticket("b", weight=2),
            _ticket("b", weight=2),
            _ticket("c", band=9),
        ]
        tasks = [asyncio.create_task(queue.wait(t, 60)) for t in waiting]
        await _settle()
        counts = [
            # band 9's one; a's deadline-10; b (weight 2) serves 2 per a's 1: all 3 of it.
            queue.ahead(_ticket("a", 20.0)),
            # No deadline: behind all 3 of a's, and b's 3.
            queue.ahead(_ticket("a")),
            # The top band: only c's one, which fair share alternates with.
            queue.ahead(_ticket("d", 1.0, band=9)),
        ]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return counts

    assert asyncio.run(main()) == [1 + 1 + 3, 1 + 3 + 3, 1]


def test_the_recheck_refuses_those_past_their_deadline_or_estimated_past_it() -> None:
    async def main() -> tuple[list[str], list[BaseException | str]]:
        queue = _queue()
        tickets = [_ticket("a", 5.0), _ticket("a", 100.0), _ticket("a", 12.0), _ticket("b")]
        tasks = [asyncio.create_task(queue.wait(t, 60)) for t in tickets]
        await _settle()
        # At t=10, one slot freeing every 2 s: 5.0 has passed; 12.0 waits behind 5.0 (refused
        # in the same pass) and b's one, about 6 s; 100.0 about 8 s.
        late = queue.late(10.0, lambda ahead: wait_estimate(ahead, 2.0, 1))
        names = [f"{w.ticket.deadline}:{wait}" for w, wait in late]
        for waiter, wait in late:
            queue.refuse(waiter, wait)
        await _settle()
        assert len(queue) == 2
        for task in tasks[1::2]:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        return names, [r if isinstance(r, BaseException) else str(r) for r in results]

    names, results = asyncio.run(main())
    assert names == ["5.0:None", "12.0:6.0"]
    assert isinstance(results[0], DeadlineUnreachable)
    assert results[0].estimate_s is None
    assert isinstance(results[2], DeadlineUnreachable)
    assert results[2].estimate_s == 6.0


@pytest.mark.parametrize(
    ("header", "key", "team", "expected"),
    [
        (None, None, None, None),
        (None, None, 900, 900),
        (None, 50, 900, 50),
        ("7", 50, 900, 7),
        (" 86400000 ", None, None, 86_400_000),
    ],
)
def test_the_header_overrides_the_key_which_overrides_the_team(
    header: str | None, key: int | None, team: int | None, expected: int | None
) -> None:
    assert deadline_ms(header, key, team) == expected


@pytest.mark.parametrize("header", ["", "0", "-1", "+5", "1.5", "1e3", "86400001", "9" * 5000, "٣"])
def test_a_bad_header_is_a_400_naming_it(header: str) -> None:
    with pytest.raises(GatewayError) as caught:
        deadline_ms(header, 100, 100)
    assert (caught.value.code, caught.value.param) == (ErrorCode.INVALID_REQUEST, DEADLINE_HEADER)


def test_no_estimate_before_the_pool_served_anything() -> None:
    assert wait_estimate(3, None, 4) is None
    assert wait_estimate(3, 2.0, 4) == 2.0
    assert math.isclose(wait_estimate(0, 1.0, 3) or 0, 1 / 3)
