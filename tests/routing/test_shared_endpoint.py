"""One team must not be able to eject an endpoint every team shares (issue 11).

A team's own requests can make a worker answer 500 or run past their deadlines; those failures
alone never eject. The endpoint goes only on failures no request can cause (connect errors), on
failures seen from several teams, or when its `/health` probe, asked at once, fails too.

Every gateway here has one endpoint and a probe interval far longer than any test: the only probes
after the first are the ones the failures ask for.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from gateway.model_table import HealthConfig, ModelConfig, ModelTable, Timeouts
from tests.conftest import Gateway, GatewayFactory
from tests.routing.conftest import WorkerFactory, chat, endpoint_view, metric
from tests.routing.worker import ProgrammableWorker
from tests.servers import run_uvicorn
from tests.waiting import wait_until

# Short enough that the stalled requests cost seconds; long enough that a healthy worker on a busy
# machine never times out (a spurious timeout would be one more team's failure).
FAST = Timeouts(connect=2, first_token=2, idle=4, total=2)
HEALTH = HealthConfig(failures_to_eject=2, ejection_base=30, ejection_max=60, probe_interval=3600)
FAIL_500 = {"x-worker-fail-status": "500"}


def _gateway(make_gateway: GatewayFactory, url: str) -> contextlib.AbstractContextManager[Gateway]:
    table = ModelTable((ModelConfig(name="m", endpoints=(url,), timeouts=FAST, health=HEALTH),))
    return make_gateway(table)


def _first_probe_answered(worker: ProgrammableWorker) -> int:
    # The status of a probe is fixed when it is counted: a change made after this applies to later
    # probes only.
    wait_until(lambda: worker.health_probes >= 1, 5, "the gateway probed the worker at start")
    return worker.health_probes


def _error_code(reply: Any) -> str:
    code: str = reply.json()["error"]["code"]
    return code


def test_one_teams_500s_do_not_eject_the_only_endpoint(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    worker, url = workers()
    with _gateway(make_gateway, url) as gw:
        provoking, other = gw.new_key()["key"], gw.new_key()["key"]
        probes = _first_probe_answered(worker)
        for _ in range(HEALTH.failures_to_eject + 2):
            reply = chat(gw, provoking, headers=FAIL_500)
            assert (reply.status, _error_code(reply)) == (502, "upstream_error")
        assert chat(gw, other).status == 200
        # The failures asked for a probe now; it passes, so the endpoint stays.
        wait_until(lambda: worker.health_probes > probes, 5, "the suspect endpoint was probed")
        assert chat(gw, other).status == 200
        assert endpoint_view(gw, "m", url)["state"] == "healthy"
        assert metric(gw, "sluicegate_endpoint_ejections_total", endpoint=url) == 0


@pytest.mark.parametrize(
    ("stream", "stall"),
    [(True, "first-event"), (False, "head")],
    ids=["stream-first-token", "whole-answer-total"],
)
def test_one_teams_requests_timing_out_do_not_eject_the_only_endpoint(
    make_gateway: GatewayFactory, workers: WorkerFactory, stream: bool, stall: str
) -> None:
    _worker, url = workers()
    with _gateway(make_gateway, url) as gw:
        slow, other = gw.new_key()["key"], gw.new_key()["key"]
        for _ in range(HEALTH.failures_to_eject + 1):
            reply = chat(gw, slow, stream=stream, headers={"x-worker-stall": stall})
            assert b"upstream_timeout" in reply.body
        served = chat(gw, other, stream=True)
        assert served.status == 200
        assert b"[DONE]" in served.body
        assert endpoint_view(gw, "m", url)["state"] == "healthy"


def test_failures_from_two_teams_eject_and_4xx_never_count(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    _worker, url = workers()
    with _gateway(make_gateway, url) as gw:
        first, second, third = (gw.new_key()["key"] for _ in range(3))
        for key in (first, second):  # the client's mistake, whoever made it
            for _ in range(HEALTH.failures_to_eject + 1):
                assert chat(gw, key, headers={"x-worker-fail-status": "400"}).status == 400
        assert endpoint_view(gw, "m", url)["consecutive_failures"] == 0
        for _ in range(HEALTH.failures_to_eject + 1):
            assert chat(gw, first, headers=FAIL_500).status == 502
        assert endpoint_view(gw, "m", url)["state"] == "healthy"
        assert chat(gw, second, headers=FAIL_500).status == 502  # a second team sees it fail too
        assert endpoint_view(gw, "m", url)["state"] == "ejected"
        assert metric(gw, "sluicegate_endpoint_ejections_total", endpoint=url) == 1
        reply = chat(gw, third)
        assert (reply.status, _error_code(reply)) == (503, "no_healthy_upstream")


def test_one_teams_failures_take_out_an_endpoint_whose_probe_fails_too(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    worker, url = workers()
    with _gateway(make_gateway, url) as gw:
        provoking, other = gw.new_key()["key"], gw.new_key()["key"]
        _first_probe_answered(worker)
        worker.health_status = 503  # seen only by a probe the failures ask for
        for _ in range(HEALTH.failures_to_eject):
            assert chat(gw, provoking, headers=FAIL_500).status == 502
        wait_until(lambda: endpoint_view(gw, "m", url)["state"] == "unhealthy", 5, "the probe confirmed")
        reply = chat(gw, other)
        assert (reply.status, _error_code(reply)) == (503, "no_healthy_upstream")


def test_one_teams_connect_errors_still_eject(make_gateway: GatewayFactory) -> None:
    doomed = ProgrammableWorker()
    with contextlib.ExitStack() as worker_running:
        url = worker_running.enter_context(run_uvicorn(doomed.app()))
        with _gateway(make_gateway, url) as gw:
            key = gw.new_key()["key"]
            _first_probe_answered(doomed)  # passed; the next one is an hour away
            worker_running.close()  # in-flight answers finish, then connecting is refused
            for _ in range(HEALTH.failures_to_eject):
                reply = chat(gw, key)
                assert (reply.status, _error_code(reply)) == (503, "no_healthy_upstream")
            assert endpoint_view(gw, "m", url)["state"] == "ejected"
            assert metric(gw, "sluicegate_endpoint_ejections_total", endpoint=url) == 1
