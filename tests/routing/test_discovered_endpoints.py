"""Endpoints handed to the router by discovery: pending until `/v1/models` confirms the pool's
model, replaced as a set, removed ones taking no new requests. The router, monitor and upstream run
in this test's event loop against workers on real sockets."""

from __future__ import annotations

import asyncio
import random

import orjson
import pytest

from gateway.model_table import HealthConfig, KubernetesTarget, ModelConfig, ModelTable, PoolConfig
from gateway.observability.metrics import Metrics
from gateway.proxy.upstream import Upstream
from gateway.routing.monitor import Monitor
from gateway.routing.policy import RouteRequest
from gateway.routing.router import Router
from gateway.routing.unavailable import PoolUnavailable
from gateway.worker.client import WorkerClient
from tests.routing.conftest import WorkerFactory
from tests.waiting import eventually

POOL = "m/discovered"


def _model() -> ModelConfig:
    pool = PoolConfig(name=POOL, kubernetes=KubernetesTarget(service="m"), upstream_model="m-wire")
    return ModelConfig(name="m", pools=(pool,), health=HealthConfig(probe_interval=0.2))


async def _send(upstream: Upstream, router: Router) -> None:
    route = router.resolve("m")
    assert route is not None
    body = orjson.dumps({"model": "m-wire", "messages": [{"role": "user", "content": "x"}]})
    response = await upstream.open(
        router.plan(route),
        "/v1/chat/completions",
        lambda pool: body,
        {"content-type": "application/json"},
        RouteRequest(model="m"),
        head_deadline=asyncio.get_running_loop().time() + 5,
        stream=False,
    )
    assert response.response.status == 200
    while await response.response.content.readany():
        pass
    response.release()


def test_pending_endpoints_take_traffic_only_once_they_serve_the_model(workers: WorkerFactory) -> None:
    right, right_url = workers(models=("m-wire",))
    wrong, wrong_url = workers(models=("something-else",))
    later, later_url = workers(models=("m-wire",))

    async def scenario() -> None:
        router = Router(ModelTable((_model(),)), Metrics(), rng=random.Random(1))
        session = WorkerClient()
        monitor = Monitor(router, session)
        upstream = Upstream(session, router, router.metrics)
        pool = router.pool(POOL)
        assert pool is not None
        try:
            with pytest.raises(PoolUnavailable):
                pool.try_acquire(RouteRequest("m"), router.rng)
            router.set_endpoints(POOL, [right_url, wrong_url])
            # Before the monitor has confirmed anything, neither takes a request.
            with pytest.raises(PoolUnavailable):
                pool.try_acquire(RouteRequest("m"), router.rng)
            monitor.start()
            await eventually(lambda: pool.healthy_count() == 1, "one usable endpoint", within=3)
            await asyncio.sleep(1.2)  # another confirmation round: the wrong one stays pending
            states = {e.url: e.state.value for e in pool.endpoints}
            assert states == {right_url: "healthy", wrong_url: "pending"}
            for _ in range(10):
                await _send(upstream, router)
            assert (right.requests, wrong.requests) == (10, 0)

            router.set_endpoints(POOL, [wrong_url, later_url])  # `right` is gone
            await eventually(lambda: pool.healthy_count() == 1, "one usable endpoint", within=3)
            for _ in range(5):
                await _send(upstream, router)
            assert (right.requests, wrong.requests, later.requests) == (10, 0, 5)

            # The model is replaced (a changed autodiscovered Service): a kept pool keeps its state.
            router.add_model(_model())
            assert router.pool(POOL) is not pool
            replaced = router.pool(POOL)
            assert replaced is not None
            assert replaced.healthy_count() == 1
            router.remove_model("m")
            assert router.resolve("m") is None
        finally:
            await monitor.stop()
            await upstream.aclose()
            await session.aclose()

    asyncio.run(scenario())
