"""A saturated pool through the real gateway: weighted fair queueing across teams, queue timeouts,
and clients that leave while queued."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator

from gateway.model_table import ModelConfig, ModelTable, RoutingConfig
from tests.conftest import Gateway, GatewayFactory
from tests.routing.conftest import WorkerFactory, chat, metric
from tests.routing.worker import ProgrammableWorker
from tests.waiting import wait_until

SERVICE_S = 0.1


def _latencies(gw: Gateway, key: str, count: int, out: list[float]) -> None:
    for _ in range(count):
        started = time.monotonic()
        assert chat(gw, key).status == 200
        out.append(time.monotonic() - started)


def _flood(gw: Gateway, key: str, stop: threading.Event) -> None:
    while not stop.is_set():
        assert chat(gw, key, user="heavy").status == 200


def test_a_light_team_keeps_its_wait_when_a_heavy_team_floods_the_pool(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    """Counted, not timed: with the worker held, the heavy team fills both slots and 8 queue
    places; the light team's one request joins the queue behind them. Once the worker lets go,
    FIFO would send all 8 heavy requests first; fair share sends the light one at the first slot."""
    worker, url = workers(delay_s=SERVICE_S)
    routing = RoutingConfig(max_inflight_per_endpoint=2, max_queue=100, max_queue_wait=20)
    table = ModelTable((ModelConfig(name="m", endpoints=(url,), routing=routing),))
    with make_gateway(table) as gw:
        heavy, light = gw.new_key()["key"], gw.new_key()["key"]
        assert chat(gw, light, user="light").status == 200  # the light team has been served before
        worker.stall = True
        stop = threading.Event()
        flood = [threading.Thread(target=_flood, args=(gw, heavy, stop)) for _ in range(10)]
        for thread in flood:
            thread.start()
        answer: list[int] = []
        asker = threading.Thread(target=lambda: answer.append(chat(gw, light, user="light").status))
        try:
            wait_until(lambda: metric(gw, "sluicegate_pool_queue_depth", pool="m") == 8, 10, "heavy queued")
            asker.start()
            wait_until(lambda: metric(gw, "sluicegate_pool_queue_depth", pool="m") == 9, 10, "light queued")
            before = len(worker.arrivals)
            worker.stall = False
            asker.join(timeout=20)
        finally:
            worker.stall = False
            stop.set()
            for thread in flood:
                thread.join(timeout=20)
        assert answer == [200]
        after = worker.arrivals[before:]
        heavy_first = after.index("light")
        # One heavy request at most may take a freed slot first (both slots free at once).
        assert heavy_first <= 1, after


@contextlib.contextmanager
def _one_slot_taken(
    make_gateway: GatewayFactory, workers: WorkerFactory, *, max_queue_wait: float
) -> Iterator[tuple[Gateway, str, ProgrammableWorker]]:
    """A pool of one endpoint with one slot, held by a request until the test is done, so the next
    one queues however long the test takes."""
    worker, url = workers()
    worker.hold = True
    routing = RoutingConfig(max_inflight_per_endpoint=1, max_queue=10, max_queue_wait=max_queue_wait)
    table = ModelTable((ModelConfig(name="m", endpoints=(url,), routing=routing),))
    with make_gateway(table) as gw:
        key = gw.new_key()["key"]
        holder = threading.Thread(target=chat, args=(gw, key))
        holder.start()
        wait_until(lambda: metric(gw, "sluicegate_endpoint_inflight", pool="m") == 1, 10, "slot taken")
        try:
            yield gw, key, worker
        finally:
            worker.hold = False
            holder.join(timeout=5)


def test_a_queue_timeout_is_a_503_with_retry_after(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    with _one_slot_taken(make_gateway, workers, max_queue_wait=0.3) as (gw, key, _):
        reply = chat(gw, key)  # the slot is never freed: only the queue's wait can end this
        assert reply.status == 503
        assert reply.headers["retry-after"] == "1"
        error = reply.json()["error"]
        assert (error["code"], error["type"]) == ("queue_timeout", "upstream_error")
        assert metric(gw, "sluicegate_queue_rejections_total", pool="m", reason="timeout") == 1


def test_a_client_that_leaves_while_queued_leaves_the_queue_at_once(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    with _one_slot_taken(make_gateway, workers, max_queue_wait=600) as (gw, key, worker):
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
        port = int(gw.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            head = (
                f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
            )
            sock.sendall(head.encode() + body)
            wait_until(lambda: metric(gw, "sluicegate_pool_queue_depth", pool="m") == 1, 10, "queued")
        # The client hung up while its request waited in the queue. The slot stays taken and the
        # queue's wait is 600 s: only the client's leaving can empty the queue.
        wait_until(lambda: metric(gw, "sluicegate_pool_queue_depth", pool="m") == 0, 10, "queue emptied")
        assert worker.requests == 1  # the one that held the slot; the queued one never went out
    assert worker.requests == 1
