"""Sick endpoints through the real gateway: stalled, failing, coming back; retries that must not
duplicate a stream."""

from __future__ import annotations

import time
import uuid

from gateway.model_table import HealthConfig, ModelConfig, ModelTable, RoutingConfig, Timeouts
from tests.conftest import GatewayFactory
from tests.routing.conftest import WorkerFactory, chat, endpoint_view, metric
from tests.servers import listening_socket, run_uvicorn
from tests.waiting import wait_until
from workers.fake.app import create_app as create_fake_worker

# Short enough that a stalled endpoint costs a test seconds, not minutes; long enough that a
# healthy worker on a busy machine never times out (a spurious timeout is a failure that ejects).
FAST = Timeouts(connect=2, first_token=2, idle=4, total=2)


def test_a_stalled_endpoint_is_cut_off_ejected_and_readmitted_after_a_trial(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    good, good_url = workers()
    stalled, stalled_url = workers()
    stalled.stall = True  # takes the connection and the request, never answers a generation
    # One team's requests: ejecting on them alone is opt-in (tests/routing/test_shared_endpoint.py).
    health = HealthConfig(
        failures_to_eject=2, teams_to_eject=1, ejection_base=5, ejection_max=5, probe_interval=0.2
    )
    table = ModelTable(
        (ModelConfig(name="m", endpoints=(good_url, stalled_url), timeouts=FAST, health=health),)
    )
    with make_gateway(table) as gw:
        key = gw.new_key()["key"]
        outcomes = []
        for _ in range(12):
            # The stalled endpoint never answers: each request ends only because the gateway cut
            # it off (the client's own timeout is 30 s, the stream's total an hour).
            reply = chat(gw, key, stream=True)
            outcomes.append(reply.status)
            if reply.status == 504:
                assert reply.json()["error"]["code"] == "upstream_timeout"
            if endpoint_view(gw, "m", stalled_url)["state"] == "ejected":
                break
        assert endpoint_view(gw, "m", stalled_url)["state"] == "ejected", outcomes
        assert metric(gw, "sluicegate_endpoint_ejections_total", endpoint=stalled_url) >= 1
        assert metric(gw, "sluicegate_pool_healthy_endpoints", pool="m") == 1
        before = stalled.requests
        for _ in range(5):  # the 5 s backoff outlasts these: none reaches the stalled one
            assert chat(gw, key).status == 200
        assert stalled.requests == before

        stalled.stall = False

        # After the backoff one trial request goes to it, and its success re-admits it.
        def readmitted() -> bool:
            assert chat(gw, key).status == 200
            return bool(endpoint_view(gw, "m", stalled_url)["state"] == "healthy")

        wait_until(readmitted, 20, "the recovered endpoint was re-admitted")
        assert stalled.requests > before
        assert good.requests > 0


def test_an_endpoint_that_accepts_connections_and_never_answers_is_routed_around(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    _good, good_url = workers()
    sock = listening_socket()
    sock.listen(64)  # the kernel completes handshakes; nobody ever reads or answers
    black_hole = f"http://127.0.0.1:{sock.getsockname()[1]}"
    health = HealthConfig(failures_to_eject=1, ejection_base=30, ejection_max=30, probe_interval=0.2)
    table = ModelTable(
        (ModelConfig(name="m", endpoints=(black_hole, good_url), timeouts=FAST, health=health),)
    )
    try:
        with make_gateway(table) as gw:
            key = gw.new_key()["key"]
            for _ in range(6):  # each ends: nothing behind the black hole would ever answer
                reply = chat(gw, key, stream=True)
                assert reply.status in (200, 504)
            wait_until(
                lambda: endpoint_view(gw, "m", black_hole)["state"] in ("ejected", "unhealthy"),
                3,
                "the black hole is out of rotation",
            )
            for _ in range(5):
                assert chat(gw, key, stream=True).status == 200
    finally:
        sock.close()


def test_a_5xx_endpoint_is_ejected_after_n_failures_and_its_503s_are_retried(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    _good, good_url = workers()
    failing, failing_url = workers()
    failing.fail_status = 503
    health = HealthConfig(
        failures_to_eject=3, teams_to_eject=1, ejection_base=30, ejection_max=60, probe_interval=30
    )
    table = ModelTable((ModelConfig(name="m", endpoints=(good_url, failing_url), health=health),))
    with make_gateway(table) as gw:
        key = gw.new_key()["key"]
        for _ in range(20):
            assert chat(gw, key).status == 200  # a 503 before the body is retried on the other
        assert failing.requests == 3
        assert endpoint_view(gw, "m", failing_url)["state"] == "ejected"
        assert metric(gw, "sluicegate_endpoint_ejections_total", pool="m", endpoint=failing_url) == 1
        assert metric(gw, "sluicegate_upstream_retries_total", pool="m") == 3


def test_a_stream_that_broke_after_its_first_bytes_is_never_retried(make_gateway: GatewayFactory) -> None:
    with (
        run_uvicorn(create_fake_worker(["m"])) as first,
        run_uvicorn(create_fake_worker(["m"])) as second,
    ):
        table = ModelTable(
            (
                ModelConfig(
                    name="m",
                    endpoints=(first, second),
                    routing=RoutingConfig(policy="least_loaded"),
                    health=HealthConfig(failures_to_eject=100),
                ),
            )
        )
        with make_gateway(table) as gw:
            key = gw.new_key()["key"]
            for _ in range(6):
                request_id = uuid.uuid4().hex
                reply = chat(
                    gw,
                    key,
                    stream=True,
                    headers={"x-fake-fail-after": "2", "x-request-id": request_id},
                )
                assert reply.status == 200
                assert b"upstream_error" in reply.body  # the break is reported in the stream
                seen = [_received(url, request_id) for url in (first, second)]
                assert sum(seen) == 1, "the request reached a worker twice"
            assert metric(gw, "sluicegate_upstream_retries_total", pool="m") == 0


def _received(worker_url: str, request_id: str) -> bool:
    from tests.conftest import worker_record

    return worker_record(worker_url, request_id) is not None


def test_the_health_probe_marks_a_failing_worker_unhealthy_but_not_one_without_the_route(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    sick, sick_url = workers()
    no_route, no_route_url = workers()
    no_route.health_status = 404  # an OpenAI-compatible server that has no /health at all
    health = HealthConfig(probe_interval=0.2)
    table = ModelTable((ModelConfig(name="m", endpoints=(sick_url, no_route_url), health=health),))
    with make_gateway(table) as gw:
        sick.health_status = 503
        wait_until(lambda: endpoint_view(gw, "m", sick_url)["state"] == "unhealthy", 10, "503 probes count")
        time.sleep(0.5)  # a few more probe rounds
        assert endpoint_view(gw, "m", no_route_url)["state"] == "healthy"
        key = gw.new_key()["key"]
        for _ in range(4):
            assert chat(gw, key).status == 200
        assert sick.requests == 0
        sick.health_status = 200
        wait_until(lambda: endpoint_view(gw, "m", sick_url)["state"] == "healthy", 10, "probe heals")


def test_a_health_answer_slower_than_the_probe_interval_still_passes(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    """A probe is allowed the connect timeout (30 s here), not the interval (0.1 s): an endpoint
    that answers /health in 0.5 s is healthy, however often it is probed."""
    slow, slow_url = workers()
    slow.health_delay_s = 0.5
    table = ModelTable(
        (
            ModelConfig(
                name="m",
                endpoints=(slow_url,),
                timeouts=Timeouts(connect=30),
                health=HealthConfig(probe_interval=0.1),
            ),
        )
    )
    with make_gateway(table) as gw:
        wait_until(lambda: slow.health_probes >= 3, 20, "three probes answered")
        assert endpoint_view(gw, "m", slow_url)["state"] == "healthy"
        assert chat(gw, gw.new_key()["key"]).status == 200


def test_an_endpoint_whose_health_never_answers_delays_only_its_own_probes(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    hung, hung_url = workers(models=("a",))
    hung.health_hang = True  # its first probe waits out the 30 s connect timeout
    sick, sick_url = workers(models=("b",))
    quick = HealthConfig(probe_interval=0.1)
    table = ModelTable(
        (
            ModelConfig(name="a", endpoints=(hung_url,), timeouts=Timeouts(connect=30), health=quick),
            ModelConfig(name="b", endpoints=(sick_url,), health=quick),
        )
    )
    with make_gateway(table) as gw:
        wait_until(lambda: hung.health_probes == 1, 10, "the hung endpoint was probed")
        sick.health_status = 503
        # Within 10 s, while the hung probe still has 20 s to go: the other pool's probes went on.
        wait_until(lambda: endpoint_view(gw, "b", sick_url)["state"] == "unhealthy", 10, "b probed")
        assert hung.health_probes == 1, "a second probe was sent while the first was still out"


def test_a_load_whose_scrape_never_answers_is_forgotten_after_three_intervals(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    """Scraped each second, each scrape allowed 30 s: the load goes once the scrape still out has
    gone unanswered for three seconds, long before that scrape's own timeout."""
    worker, url = workers()
    table = ModelTable(
        (
            ModelConfig(
                name="m",
                endpoints=(url,),
                routing=RoutingConfig(policy="least_loaded"),
                timeouts=Timeouts(connect=30),
                health=HealthConfig(probe_interval=60),
            ),
        )
    )
    with make_gateway(table) as gw:
        wait_until(lambda: endpoint_view(gw, "m", url)["load"] is not None, 10, "the load was scraped")
        worker.metrics_hang = True
        wait_until(lambda: endpoint_view(gw, "m", url)["load"] is None, 15, "the stale load was forgotten")
        assert endpoint_view(gw, "m", url)["state"] == "healthy"  # /health still answers


def test_an_endpoint_that_takes_no_requests_is_not_scraped(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    _good, good_url = workers()
    sick, sick_url = workers()
    table = ModelTable(
        (
            ModelConfig(
                name="m",
                endpoints=(good_url, sick_url),
                routing=RoutingConfig(policy="least_loaded"),
                health=HealthConfig(probe_interval=0.1),  # probed and scraped every 0.1 s
            ),
        )
    )
    with make_gateway(table) as gw:
        wait_until(lambda: sick.metrics_scrapes >= 1, 10, "scraped while healthy")
        sick.health_status = 503
        wait_until(lambda: endpoint_view(gw, "m", sick_url)["state"] == "unhealthy", 10, "probe failed")
        scrapes, probes = sick.metrics_scrapes, sick.health_probes
        wait_until(lambda: sick.health_probes >= probes + 10, 20, "ten more probes")
        assert sick.metrics_scrapes <= scrapes + 1  # one may have been out when it turned
        assert endpoint_view(gw, "m", sick_url)["load"] is None  # and its old load went with it
