"""Failures as a coding agent sees them: errors that name the model and pool but never where a
worker runs (agents print them to their user), and a `retry-after` that says when a pool with no
healthy endpoint may serve again, instead of a fixed 1."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import orjson
import pytest

from gateway.errors import ErrorCode, GatewayError
from gateway.model_table import HealthConfig, ModelConfig, ModelTable, PoolConfig, Timeouts
from gateway.observability.metrics import Metrics
from gateway.proxy.upstream import Upstream
from gateway.proxy.worker_errors import worker_failure
from gateway.proxy.worker_protocols import failure_event
from gateway.routing import health
from gateway.routing.policy import RouteRequest
from gateway.routing.pool import Pool
from gateway.routing.router import Router
from gateway.routing.unavailable import retry_after
from gateway.worker.client import WorkerClient
from tests.conftest import Gateway, GatewayFactory
from tests.http import Reply, post
from tests.routing.conftest import WorkerFactory, endpoint_view
from tests.servers import free_port
from tests.waiting import wait_until

HELLO = [{"role": "user", "content": "hi"}]


def _ask_every_api(gw: Gateway, key: str, model: str) -> list[tuple[str, Reply]]:
    """One request per client API, whole and streamed, each expected to fail."""
    replies = []
    for stream in (False, True):
        replies += [
            (
                "chat",
                post(
                    f"{gw.url}/v1/chat/completions",
                    {"model": model, "messages": HELLO, "stream": stream},
                    key=key,
                ),
            ),
            (
                "messages",
                post(
                    f"{gw.url}/v1/messages",
                    {"model": model, "max_tokens": 8, "messages": HELLO, "stream": stream},
                    key=key,
                ),
            ),
            (
                "responses",
                post(f"{gw.url}/v1/responses", {"model": model, "input": "hi", "stream": stream}, key=key),
            ),
        ]
    return replies


def _assert_no_address(replies: list[tuple[str, Reply]], port: int) -> None:
    for api, reply in replies:
        text = reply.body.decode()
        assert reply.status >= 500, (api, reply.status, text)  # (Messages says 529 for a 503)
        assert "127.0.0.1" not in text, (api, text)
        assert str(port) not in text, (api, text)
        assert "'m'" in text, (api, text)  # the model is named


@pytest.mark.parametrize("failure", ["503", "refused", "timeout"])
def test_a_failing_worker_is_named_by_model_and_pool_never_by_address(
    make_gateway: GatewayFactory, workers: WorkerFactory, all_logs: list[str], failure: str
) -> None:
    if failure == "refused":
        port = free_port()
        url = f"http://127.0.0.1:{port}"
    else:
        worker, url = workers()
        port = int(url.rsplit(":", 1)[1])
        worker.fail_status = 503 if failure == "503" else None
        worker.stall = failure == "timeout"
    model = ModelConfig(
        name="m",
        endpoints=(url,),
        # Never ejected, never probed out during the test: every request reaches the worker.
        health=HealthConfig(failures_to_eject=1000, probe_interval=3600),
        timeouts=Timeouts(first_token=0.5, total=0.5),
    )
    with make_gateway(ModelTable((model,))) as gw:
        key = gw.new_key()["key"]
        _assert_no_address(_ask_every_api(gw, key, "m"), port)
    if failure != "timeout":
        # The operator still learns which endpoint failed: the log keeps its URL (the request's
        # attempt, or the start-up probe that found it down first).
        assert any(url in line and "fail" in line for line in all_logs)


def test_a_pool_named_by_its_model_and_pool_when_they_differ() -> None:
    error = worker_failure(
        "m",
        503,
        b'{"error": {"message": "upstream connect error to http://10.0.0.7:8000/v1 (10.0.0.7:8000)"}}',
        {},
        pool="m/canary",
    )
    assert error.message == (
        "The worker for model 'm' (pool 'm/canary') failed (HTTP 503): "
        "upstream connect error to <address> (<address>)"
    )
    # A refusal is about the request: its own words, URLs included, go back as they are.
    refusal = worker_failure("m", 400, b'{"error": {"message": "cannot fetch http://example.com/a.png"}}', {})
    assert refusal.message == "cannot fetch http://example.com/a.png"


def test_retry_after_says_when_the_next_probe_of_a_down_pool_is_due(
    make_gateway: GatewayFactory,
) -> None:
    port = free_port()
    dead = f"http://127.0.0.1:{port}"
    model = ModelConfig(name="m", endpoints=(dead,), health=HealthConfig(probe_interval=20))
    with make_gateway(ModelTable((model,))) as gw:
        # The monitor probes at start; the failing probe takes the endpoint out for 20 s.
        wait_until(lambda: endpoint_view(gw, "m", dead)["state"] == "unhealthy", 10, "the probe failed")
        key = gw.new_key()["key"]
        replies = _ask_every_api(gw, key, "m")
        _assert_no_address(replies, port)
        for api, reply in replies:
            seconds = int(reply.headers["retry-after"])
            # The next probe is due 20 s after the first one, which was before this request.
            assert 1 < seconds <= 20, (api, seconds)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _pool(urls: tuple[str, ...], clock: _Clock, **health_fields: Any) -> Pool:
    model = ModelConfig(name="m", endpoints=urls, health=HealthConfig(**health_fields))
    return Pool(model, PoolConfig(name="m", endpoints=urls), Metrics(), rng=random.Random(1), clock=clock)


def test_the_soonest_ejection_end_or_probe_is_the_pools_next_chance() -> None:
    clock = _Clock()
    pool = _pool(("http://a:1", "http://b:1"), clock, failures_to_eject=1, ejection_base=30, probe_interval=5)
    a, b = pool.endpoints
    assert pool.next_chance_s() is None  # both healthy: nothing is due
    pool.report(a, health.ENDPOINT_FAILED, trial=False)
    assert pool.next_chance_s() == 30.0  # a's ejection ends in 30 s
    clock.now += 10
    assert pool.next_chance_s() == 20.0
    b.last_probe_at = clock.now - 2
    pool.probe_result(b, ok=False)  # b's probe fails; the next one is due in 3 s
    assert pool.next_chance_s() == 3.0
    assert [retry_after(s) for s in (None, 0.0, 0.2, 1.0, 1.01, 29.5, 1e9)] == [
        "1",
        "1",
        "1",
        "1",
        "2",
        "30",
        "3600",
    ]


# -- a worker's own words, in the forms that name where it runs -----------------------------------

_ADDRESSED = [
    # aiohttp's text, from a Python proxy in front of the engine
    "Cannot connect to host vllm-0.vllm.svc.cluster.local:8000 ssl:default "
    "[Connect call failed ('fd00::5', 8000, 0, 0)]",
    "proxy error: http%3A%2F%2F10.0.0.7%3A8000%2Fv1 refused",  # a URL, percent-encoded
    "no upstream: 2001:db8::ff00:42:8329 and [fe80::1%25eth0]:8000 and localhost:8000",
    "host gpu-3.internal refused",
]


@pytest.mark.parametrize("text", _ADDRESSED)
def test_a_failing_workers_text_loses_every_address_form(text: str) -> None:
    message = worker_failure("m", 503, orjson.dumps({"error": {"message": text}}), {}).message
    for secret in ("vllm-0", "fd00", "10.0.0.7", "2001:db8", "fe80", "localhost", "8000", "gpu-3"):
        assert secret not in message, message


@pytest.mark.parametrize("error", [*({"message": text} for text in _ADDRESSED), *_ADDRESSED])
def test_a_workers_error_event_mid_stream_names_no_address(error: Any) -> None:
    """The chat, Messages and Responses readers all re-tell a worker's error event this way."""
    message = failure_event(error).message
    assert message.startswith("The worker failed mid-stream: "), message
    for secret in ("vllm-0", "fd00", "10.0.0.7", "2001:db8", "fe80", "localhost", "8000", "gpu-3"):
        assert secret not in message, message


def test_an_ejected_endpoint_whose_probe_fails_is_back_when_both_allow() -> None:
    """An endpoint serves again only once its ejection is over AND its probe passes: the later
    of the two is its next chance, not the sooner."""
    clock = _Clock()
    pool = _pool(("http://a:1",), clock, failures_to_eject=1, ejection_base=30, probe_interval=5)
    (a,) = pool.endpoints
    pool.report(a, health.ENDPOINT_FAILED, trial=False)  # ejected for 30 s
    a.last_probe_at = clock.now
    pool.probe_result(a, ok=False)  # and its probe fails: the next one is due in 5 s
    assert pool.next_chance_s() == 30.0
    clock.now += 29
    assert pool.next_chance_s() == 1.0
    clock.now += 2  # the ejection is over and a probe is overdue: now
    assert pool.next_chance_s() == 0.0


def test_retry_after_stays_short_while_another_pool_may_serve_any_moment() -> None:
    """Pool `m`'s endpoint refused the connection but is not ejected: nothing is scheduled, the
    next request may reach it. The fallback's endpoint is ejected for 30 s. The client may try
    again in a second, not in 30 (the soonest of the pools' chances, `now` counting as 1)."""
    refused = f"http://127.0.0.1:{free_port()}"
    ejected = f"http://127.0.0.1:{free_port()}"
    table = ModelTable(
        (
            ModelConfig(
                name="m", endpoints=(refused,), health=HealthConfig(failures_to_eject=1000), fallbacks=("f",)
            ),
            ModelConfig(
                name="f", endpoints=(ejected,), health=HealthConfig(failures_to_eject=1, ejection_base=30)
            ),
        )
    )

    async def scenario() -> GatewayError:
        router = Router(table, Metrics(), rng=random.Random(1))
        route = router.resolve("m")
        assert route is not None
        plan = router.plan(route)
        (target,) = plan[1].endpoints
        plan[1].report(target, health.ENDPOINT_FAILED, trial=False)
        session = WorkerClient()
        try:
            upstream = Upstream(session, router, Metrics())
            loop = asyncio.get_running_loop()
            with pytest.raises(GatewayError) as caught:
                await upstream.open(
                    plan,
                    "/v1/chat/completions",
                    lambda pool: b"{}",
                    {},
                    RouteRequest("m", team="t"),
                    head_deadline=loop.time() + 10,
                    stream=False,
                )
            return caught.value
        finally:
            await upstream.aclose()
            await session.aclose()

    error = asyncio.run(scenario())
    assert error.code is ErrorCode.NO_HEALTHY_UPSTREAM, error.message
    assert error.headers["retry-after"] == "1", error.headers


def test_a_refusal_loses_the_workers_own_address_and_keeps_the_clients() -> None:
    """A 4xx goes back in the worker's words (they are about the request, the client's own URLs
    included), but never with the address of the worker that answered (a proxy in front of it
    naming its upstream)."""
    said = (
        "upstream http://10.0.0.7:8000/v1/chat/completions (10.0.0.7:8000, 10.0.0.7) refused: "
        "cannot fetch http://example.com/a.png; vllm says no"
    )
    body = orjson.dumps({"error": {"message": said}})
    refusal = worker_failure("m", 400, body, {}, endpoint="http://10.0.0.7:8000")
    assert refusal.message == (
        "upstream <address>/v1/chat/completions (<address>, <address>) refused: "
        "cannot fetch http://example.com/a.png; vllm says no"
    )
    named = worker_failure(
        "m", 404, b'{"detail": "no route on vllm:8000; vllm"}', {}, endpoint="http://vllm:8000"
    )
    assert named.message == "no route on <address>; vllm"  # a bare one-word host name stays
    failed = worker_failure(
        "m", 503, b'{"detail": "connect to vllm:8000 failed"}', {}, endpoint="http://vllm:8000"
    )
    assert failed.message == "The worker for model 'm' failed (HTTP 503): connect to <address> failed"
