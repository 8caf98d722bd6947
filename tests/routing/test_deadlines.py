"""Deadlines through the real gateway (gateway/routing/deadline.py): a request that cannot get its
first token in time is refused at once, a team's urgent requests overtake its others, and a bad
deadline is a 400 in each client API's envelope. Nothing is timed: the one slot is held by the
programmable worker for as long as a test needs, so "early" means "while the slot was still held,
with the queue's own wait at 600 s"."""

from __future__ import annotations

import functools
import threading
from typing import Any

import pytest

from gateway.model_table import ModelConfig, ModelTable, RoutingConfig
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory, SessionLog
from tests.http import post
from tests.routing.conftest import WorkerFactory, chat, metric
from tests.routing.test_fair_share import _one_slot_taken
from tests.waiting import wait_until

DEADLINE = "x-sluicegate-deadline-ms"


def _assert_unreachable(reply: Any) -> None:
    assert reply.status == 503, reply.body
    error = reply.json()["error"]
    assert (error["code"], error["type"]) == ("deadline_unreachable", "upstream_error")
    assert int(reply.headers["retry-after"]) >= 1


def _queued(gw: Gateway, depth: int) -> bool:
    return metric(gw, "sluicegate_pool_queue_depth", pool="m") == depth


def test_a_deadline_that_passes_while_queued_is_refused_then_not_at_max_queue_wait(
    make_gateway: GatewayFactory, workers: WorkerFactory, session_log: SessionLog
) -> None:
    """The pool has served nothing yet (no estimate), so the request queues, and its deadline's
    own timer ends its wait: a deadline_unreachable while the slot is still held and the queue's
    wait is 600 s. The worker never saw it."""
    with _one_slot_taken(make_gateway, workers, max_queue_wait=600) as (gw, key, worker):
        reply = chat(gw, key, headers={DEADLINE: "1500"})
        _assert_unreachable(reply)
        assert metric(gw, "sluicegate_deadline_refusals_total", pool="m", stage="queued") == 1
        assert metric(gw, "sluicegate_endpoint_inflight", pool="m") == 1  # still held
        assert metric(gw, "sluicegate_pool_queue_depth", pool="m") == 0
        assert metric(gw, "sluicegate_queue_rejections_total", pool="m") == 0  # not a queue timeout
        assert worker.requests == 1
        # Logged as a refusal: its access line carries the code.
        request_id = reply.headers["x-sluicegate-request-id"]
        assert any(request_id in line and "deadline_unreachable" in line for line in session_log.lines)


def test_a_pool_that_serves_slowly_refuses_a_short_deadline_on_arrival(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    """Each request holds the one slot at least 2 s, so one arriving behind a busy slot waits
    about 2 s: a 1.5 s deadline is refused at once, with the wait as its retry-after, and never
    joins the queue."""
    worker, url = workers(delay_s=2.0)
    routing = RoutingConfig(max_inflight_per_endpoint=1, max_queue=10, max_queue_wait=600)
    table = ModelTable((ModelConfig(name="m", endpoints=(url,), routing=routing),))
    with make_gateway(table) as gw:
        key = gw.new_key()["key"]
        assert chat(gw, key).status == 200  # the pool learns its service rate: >= 2 s a request
        worker.hold = True
        holder = threading.Thread(target=chat, args=(gw, key))
        holder.start()
        try:
            wait_until(lambda: metric(gw, "sluicegate_endpoint_inflight", pool="m") == 1, 10, "slot taken")
            reply = chat(gw, key, headers={DEADLINE: "1500"})
            _assert_unreachable(reply)
            assert int(reply.headers["retry-after"]) >= 2
            assert metric(gw, "sluicegate_deadline_refusals_total", pool="m", stage="arrival") == 1
            assert metric(gw, "sluicegate_deadline_refusals_total", pool="m", stage="queued") == 0
            # Metered as a refusal: the request counted with its code, no tokens.
            assert metric(gw, "sluicegate_requests_total", code="503") == 1
            # A long deadline is not refused: it waits (and is served once the slot frees).
            waiting = threading.Thread(target=lambda: chat(gw, key, headers={DEADLINE: "600000"}))
            waiting.start()
            wait_until(lambda: metric(gw, "sluicegate_pool_queue_depth", pool="m") == 1, 10, "queued")
        finally:
            worker.hold = False
            holder.join(timeout=20)
        waiting.join(timeout=20)
        assert worker.requests == 3
        assert metric(gw, "sluicegate_deadline_estimate_error_seconds_count", pool="m") == 1


def test_a_queued_request_pushed_past_its_deadline_leaves_at_once(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    """A request of a low band with a 5 s deadline joins the queue of a pool that serves one
    request per >= 2 s (about 2 s to wait: accepted). Two requests of a higher band arrive and go
    before it: its wait is now >= 6 s, so the queue's re-check refuses it while the slot is still
    held, with that wait as its retry-after (its deadline's own timer would say 1)."""
    worker, url = workers(delay_s=2.0)
    routing = RoutingConfig(max_inflight_per_endpoint=1, max_queue=10, max_queue_wait=600)
    table = ModelTable((ModelConfig(name="m", endpoints=(url,), routing=routing),))
    with make_gateway(table) as gw:
        key = gw.new_key()["key"]
        assert chat(gw, key).status == 200
        worker.hold = True
        threads = [threading.Thread(target=chat, args=(gw, key))]
        threads[0].start()
        replies: list[Any] = []
        try:
            wait_until(lambda: metric(gw, "sluicegate_endpoint_inflight", pool="m") == 1, 10, "slot taken")
            low = {DEADLINE: "5000", "x-sluicegate-priority": "2"}
            threads.append(threading.Thread(target=lambda: replies.append(chat(gw, key, headers=low))))
            threads[-1].start()
            wait_until(lambda: metric(gw, "sluicegate_pool_queue_depth", pool="m") == 1, 10, "low queued")
            for _ in range(2):
                threads.append(threading.Thread(target=chat, args=(gw, key)))
                threads[-1].start()
            wait_until(lambda: len(replies) == 1, 10, "the low one refused")
            _assert_unreachable(replies[0])
            assert int(replies[0].headers["retry-after"]) >= 6
            assert metric(gw, "sluicegate_deadline_refusals_total", pool="m", stage="queued") == 1
            assert metric(gw, "sluicegate_endpoint_inflight", pool="m") == 1  # still held
        finally:
            worker.hold = False
            for thread in threads:
                thread.join(timeout=30)
        assert worker.requests == 4  # the primer, the holder and the two of the higher band


def test_a_teams_urgent_requests_overtake_its_others(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    """One team queues a request without a deadline, then a 10-minute and a 5-minute one: the
    worker sees the earliest deadline first, the one without a deadline last."""
    with _one_slot_taken(make_gateway, workers, max_queue_wait=600) as (gw, key, worker):
        asks = [("none", None), ("late", "600000"), ("soon", "300000")]
        threads = []
        for depth, (user, deadline) in enumerate(asks, 1):
            headers = {DEADLINE: deadline} if deadline else None
            thread = threading.Thread(target=chat, args=(gw, key), kwargs={"user": user, "headers": headers})
            thread.start()
            threads.append(thread)
            wait_until(functools.partial(_queued, gw, depth), 10, "queued")
        worker.hold = False
        for thread in threads:
            thread.join(timeout=20)
        assert worker.arrivals[1:] == ["soon", "late", "none"]
        assert metric(gw, "sluicegate_deadline_misses_total", pool="m") == 0


def test_a_key_default_deadline_overrides_its_teams(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    with _one_slot_taken(make_gateway, workers, max_queue_wait=600) as (gw, _, worker):
        team = gw.new_team()
        gw.admin.call("PATCH", f"/admin/v1/teams/{team}", {"default_deadline_ms": 600_000})
        key = gw.new_key(team, default_deadline_ms=1500)
        assert key["limits"]["default_deadline_ms"] == 1500
        _assert_unreachable(chat(gw, key["key"]))  # no header: the key's 1.5 s, not the team's 10 min
        assert worker.requests == 1


def test_a_first_output_after_the_deadline_is_counted_as_a_miss(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    """An idle pool takes the request at once, but the worker answers after >= 0.5 s: a 100 ms
    deadline is missed, whole answer or stream, and counted; a 60 s one is not."""
    _, url = workers(delay_s=0.5)
    table = ModelTable((ModelConfig(name="m", endpoints=(url,)),))
    with make_gateway(table) as gw:
        key = gw.new_key()["key"]
        assert chat(gw, key, headers={DEADLINE: "100"}).status == 200
        assert chat(gw, key, stream=True, headers={DEADLINE: "100"}).status == 200
        assert chat(gw, key, headers={DEADLINE: "60000"}).status == 200
        assert metric(gw, "sluicegate_deadline_misses_total", pool="m") == 2
        assert metric(gw, "sluicegate_deadline_refusals_total") == 0


def test_a_request_count_fair_pool_refuses_at_the_deadline_too(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    """`fairness: requests` keeps each team FIFO, but a deadline still ends the wait."""
    worker, url = workers()
    worker.hold = True
    routing = RoutingConfig(
        max_inflight_per_endpoint=1, max_queue=10, max_queue_wait=600, fairness="requests"
    )
    table = ModelTable((ModelConfig(name="m", endpoints=(url,), routing=routing),))
    with make_gateway(table) as gw:
        key = gw.new_key()["key"]
        holder = threading.Thread(target=chat, args=(gw, key))
        holder.start()
        try:
            wait_until(lambda: metric(gw, "sluicegate_endpoint_inflight", pool="m") == 1, 10, "slot taken")
            _assert_unreachable(chat(gw, key, headers={DEADLINE: "1500"}))
            assert metric(gw, "sluicegate_deadline_refusals_total", pool="m", stage="queued") == 1
            assert metric(gw, "sluicegate_endpoint_inflight", pool="m") == 1
        finally:
            worker.hold = False
            holder.join(timeout=10)
        assert worker.requests == 1


@pytest.mark.parametrize("value", [0, -1, 1.5, "soon", True, 86_400_001])
def test_a_bad_default_deadline_is_a_400_naming_it(gateway: Gateway, value: Any) -> None:
    team = gateway.new_team()
    reply = post(
        f"{gateway.url}/admin/v1/keys",
        {"team": team, "default_deadline_ms": value},
        key=gateway.admin_token,
    )
    assert reply.status == 400, reply.body
    assert reply.json()["error"]["param"] == "default_deadline_ms"


def test_a_deadline_on_an_idle_pool_is_accepted_and_met(gateway: Gateway) -> None:
    key = gateway.new_key()["key"]
    reply = post(
        f"{gateway.url}/v1/embeddings",
        {"model": FAKE_MODEL, "input": "hello"},
        key=key,
        headers={DEADLINE: "1"},
    )
    assert reply.status == 200, reply.body
    assert reply.json()["data"][0]["embedding"]
    assert metric(gateway, "sluicegate_deadline_refusals_total") == 0


BAD = ["0", "-5", "1.5", "soon", "86400001", "99999999999999999999", "²"]


@pytest.mark.parametrize("value", BAD)
def test_a_bad_deadline_header_is_a_400_naming_it_in_openai_s_envelope(gateway: Gateway, value: str) -> None:
    key = gateway.new_key()["key"]
    body = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "hi"}]}
    reply = post(f"{gateway.url}/v1/chat/completions", body, key=key, headers={DEADLINE: value})
    assert reply.status == 400, reply.body
    error = reply.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "invalid_request",
        DEADLINE,
    )
    assert DEADLINE in error["message"]


def test_a_bad_deadline_header_is_a_400_in_anthropic_s_and_gemini_s_envelopes(gateway: Gateway) -> None:
    key = gateway.new_key()["key"]
    body = {"model": FAKE_MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01", DEADLINE: "0"}
    reply = post(f"{gateway.url}/v1/messages", body, headers=headers)
    assert reply.status == 400, reply.body
    answer = reply.json()
    assert (answer["type"], answer["error"]["type"]) == ("error", "invalid_request_error")
    assert DEADLINE in answer["error"]["message"]

    gemini = {"contents": [{"parts": [{"text": "hi"}]}]}
    path = f"/v1beta/models/{FAKE_MODEL}:generateContent"
    reply = post(f"{gateway.url}{path}", gemini, headers={"x-goog-api-key": key, DEADLINE: "1e3"})
    assert reply.status == 400, reply.body
    error = reply.json()["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert DEADLINE in error["message"]
