"""Through a real gateway: each request's fair-share charge ends, once settled, as exactly what it
used, (input + 2 x output) / weight, in the shared counter; a request that failed after a retry
on another endpoint leaves nothing charged; priority bands from a team's limits and the
`x-sluicegate-priority` header."""

from __future__ import annotations

import asyncio
import functools
import secrets
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.http.context import RequestContext
from gateway.limits.admission import Admission, Reservation
from gateway.metering.record import UsageRecord
from gateway.model_table import ModelConfig, ModelTable, RoutingConfig
from gateway.observability.metrics import Metrics
from gateway.proxy.settlement import Settlement
from gateway.proxy.usage import Usage
from gateway.redis import keys
from gateway.routing.share import ShareTicket
from tests.conftest import Gateway, GatewayFactory
from tests.http import post
from tests.routing.conftest import metric
from tests.routing.token_worker import TokenWorker
from tests.servers import run_uvicorn
from tests.waiting import wait_until


@pytest.fixture
def two_workers() -> Iterator[tuple[TokenWorker, list[str]]]:
    worker = TokenWorker()
    with run_uvicorn(worker.app()) as first, run_uvicorn(worker.app()) as second:
        yield worker, [first, second]


def _counter(redis_url: str, pool: str, team: str) -> float | None:
    async def read() -> float | None:
        redis = Redis.from_url(redis_url)
        try:
            raw = await redis.hget(keys.fair_share(pool)[0], team)
        finally:
            await redis.aclose()
        return None if raw is None else float(raw)

    return asyncio.run(read())


def _always_contended(redis_url: str, pool: str) -> None:
    """As if a team had waited on another replica, and would for good: a pool nobody waits in is
    not charged (vtc.lua keeps when a team last waited in the field "~" of its counters)."""

    async def mark() -> None:
        redis = Redis.from_url(redis_url)
        try:
            await redis.hset(keys.fair_share(pool)[0], "~", str(2**52))
        finally:
            await redis.aclose()

    asyncio.run(mark())


def test_the_counter_keeps_what_requests_used_and_nothing_of_failed_ones(
    make_gateway: GatewayFactory, redis_server: EmbeddedRedis, two_workers: tuple[TokenWorker, list[str]]
) -> None:
    worker, urls = two_workers
    model = "fs-" + secrets.token_hex(4)  # its own pool, so its own counters
    table = ModelTable(
        (ModelConfig(name=model, endpoints=tuple(urls), routing=RoutingConfig(fairness="tokens")),)
    )
    _always_contended(redis_server.url, model)
    with make_gateway(table) as gw:
        team = gw.new_team()
        updated = gw.admin.call("PATCH", f"/admin/v1/teams/{team}", {"weight": 2, "priority": 7})
        assert updated["limits"]["priority"] == 7  # the admin API takes the new limit as it is
        client = gw.client(gw.new_key(team)["key"])
        for _ in range(3):
            client.chat.completions.create(
                model=model, max_tokens=5, messages=[{"role": "user", "content": "x" * 400}]
            )
        with pytest.raises(openai.APIStatusError):
            client.chat.completions.create(
                model=model,
                max_tokens=500,
                messages=[{"role": "user", "content": "y" * 4000}],
                extra_headers={"x-worker-fail-status": "503"},
            )
        assert worker.failed == 2  # tried on both endpoints
        # 3 x (100 + 2 x 5) / 2; the failed request's two reservations were given back.
        expected = 3 * (100 + 2 * 5) / 2
        wait_until(lambda: _counter(redis_server.url, model, team) == expected, 10, "settled counters")


def _depth_is(gw: Gateway, model: str, depth: int) -> bool:
    return metric(gw, "sluicegate_pool_queue_depth", pool=model) == depth


def test_a_higher_priority_band_is_served_first_and_the_header_only_lowers_it(
    make_gateway: GatewayFactory,
) -> None:
    worker = TokenWorker(held=True)
    with run_uvicorn(worker.app()) as url:
        model = "fs-" + secrets.token_hex(4)
        routing = RoutingConfig(
            max_inflight_per_endpoint=1, max_queue=20, max_queue_wait=60, fairness="tokens"
        )
        table = ModelTable((ModelConfig(name=model, endpoints=(url,), routing=routing),))
        with make_gateway(table) as gw:
            batch = gw.new_key(gw.new_team())["key"]
            urgent_team = gw.new_team()
            gw.admin.call("PATCH", f"/admin/v1/teams/{urgent_team}", {"priority": 8})
            urgent = gw.new_key(urgent_team)["key"]
            codes: list[int] = []

            def send(key: str, tag: str, priority: str | None = None) -> threading.Thread:
                body = {
                    "model": model,
                    "user": f"{tag}|0",
                    "max_tokens": 1,
                    "messages": [{"role": "user", "content": "hi"}],
                }
                headers = {} if priority is None else {"x-sluicegate-priority": priority}

                def run() -> None:
                    codes.append(post(f"{gw.url}/v1/chat/completions", body, key=key, headers=headers).status)

                thread = threading.Thread(target=run)
                thread.start()
                return thread

            threads = [send(batch, "first")]
            wait_until(lambda: metric(gw, "sluicegate_endpoint_inflight", pool=model) == 1, 10, "slot taken")
            for key, tag, priority in (
                (batch, "batch", None),
                (urgent, "lowered", "2"),  # asks for less than its team's 8
                (urgent, "urgent", None),
                (batch, "raised", "9"),  # asks for more than the default 5: ignored
            ):
                threads.append(send(key, tag, priority))
                wait_until(functools.partial(_depth_is, gw, model, len(threads) - 1), 10, "queued")
            worker.held = False
            for thread in threads:
                thread.join(timeout=30)
    assert codes == [200] * 5
    # urgent (band 8) first; then band 5 by weighted service (batch's first request already
    # counts against it, so the two band-5 requests may come in either order); lowered last.
    order = [served.team for served in worker.served]
    assert order[0] == "first"
    assert order[1] == "urgent"
    assert sorted(order[2:4]) == ["batch", "raised"]
    assert order[4] == "lowered"


class _Charges:
    def __init__(self) -> None:
        self.corrections: list[float] = []

    def correct(self, team: str, amount: float, charged: float) -> None:
        self.corrections.append(amount)

    def settled(self, team: str, weighted: float) -> None:
        pass


@pytest.mark.parametrize(
    ("seen", "net"),
    [
        ({"reached_worker": True, "usage": Usage(40, 10)}, 60.0),  # what it used
        ({"failed": True, "attempt_failures": [("m", "status_503")]}, 0.0),  # the worker refused
        # It held the engine until the head deadline (a huge prompt, a long whole answer): not free.
        ({"failed": True, "attempt_failures": [("m", "timeout")]}, 300.0),
        ({"reached_worker": True, "failed": True, "error_reason": "upstream_timeout"}, 300.0),
    ],
)
def test_a_request_that_timed_out_on_its_worker_keeps_its_charge(seen: dict[str, Any], net: float) -> None:
    ctx = RequestContext(request_id="r1", model="m", team="t", key_id="k")
    admission = Admission(True, (), None, request_id="r1", reservation=Reservation(100, 100))

    class Meter:
        def submit(self, usage: UsageRecord) -> None:
            pass

    ticket = ShareTicket.estimated("t", 1, 5, 100, 100)  # 300
    where = _Charges()
    ticket.charged(where)
    ticket.charged(where)  # retried once: that charge is given back whole in every case
    settlement = Settlement(ctx, admission, 100, Metrics(CollectorRegistry()), Meter(), share=ticket)
    for name, value in seen.items():
        setattr(settlement.outcome, name, value)
    settlement.finish()
    settlement.finish()
    assert len(where.corrections) == 2
    assert 2 * 300.0 + sum(where.corrections) == net
