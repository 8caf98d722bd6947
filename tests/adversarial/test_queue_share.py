"""One team against a pool's queue: it may not hold more than its share of the queue's places
while another team wants one, so a newcomer gets a place instead of an immediate 503.

A real gateway in front of a programmable worker held stalled; counted by the queue-depth gauge
and the answers each team got, never by time."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from gateway.model_table import ModelConfig, ModelTable, RoutingConfig
from tests.conftest import GatewayFactory
from tests.routing.conftest import WorkerFactory, chat, metric
from tests.routing.conftest import workers as workers  # the fixture, for this module
from tests.waiting import wait_until

QUEUE = 4


@pytest.mark.parametrize("fairness", ["tokens", "requests"])
def test_a_team_that_fills_the_queue_gives_a_newcomer_a_place(
    make_gateway: GatewayFactory, workers: WorkerFactory, fairness: str
) -> None:
    worker, url = workers()
    routing = RoutingConfig(
        max_inflight_per_endpoint=1, max_queue=QUEUE, max_queue_wait=30, fairness=fairness
    )
    table = ModelTable((ModelConfig(name="m", endpoints=(url,), routing=routing),))
    with make_gateway(table) as gw:
        heavy, light = gw.new_key()["key"], gw.new_key()["key"]
        worker.stall = True
        answers: dict[str, list[Any]] = {"heavy": [], "light": []}

        def ask(name: str, key: str) -> None:
            answers[name].append(chat(gw, key, user=name, timeout=60))

        threads = [threading.Thread(target=ask, args=("heavy", heavy)) for _ in range(QUEUE + 1)]
        try:
            for thread in threads:
                thread.start()
            # One in the slot, the rest filling every queue place.
            wait_until(lambda: metric(gw, "sluicegate_pool_queue_depth", pool="m") == QUEUE, 10, "queue full")
            # The heavy team holds them all: one more of its own is refused at once.
            refused = chat(gw, heavy, user="heavy")
            assert refused.status == 503
            assert refused.json()["error"]["code"] == "pool_saturated"
            # Another team's request takes a place (the heavy team's newest gives its place up).
            for _ in range(QUEUE // 2):
                newcomer = threading.Thread(target=ask, args=("light", light))
                threads.append(newcomer)
                newcomer.start()
            wait_until(lambda: len(answers["heavy"]) == QUEUE // 2, 10, "heavy requests gave up places")
            assert metric(gw, "sluicegate_pool_queue_depth", pool="m") == QUEUE
            # At its share now: the light team's next one is refused, not another heavy one's place.
            over = chat(gw, light, user="light")
            assert over.status == 503
            assert over.json()["error"]["code"] == "pool_saturated"
        finally:
            worker.stall = False
            for thread in threads:
                thread.join(timeout=30)
        assert [reply.status for reply in answers["light"]] == [200] * (QUEUE // 2)
        heavy_statuses = sorted(reply.status for reply in answers["heavy"])
        assert heavy_statuses == [200] * (QUEUE + 1 - QUEUE // 2) + [503] * (QUEUE // 2)
        assert worker.by_user["light"] == QUEUE // 2
