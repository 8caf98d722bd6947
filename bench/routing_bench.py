"""Routing benchmark: least_loaded against round-robin on a pool of 4 workers, one 5x slower, and
the time one routing decision takes.

Everything runs in one event loop: four programmable workers (tests/routing/worker.py, each an
engine with 4 generation slots, served by uvicorn on loopback sockets), the gateway's own Router,
Monitor (the load scrape, once a second) and Upstream, and a closed-loop load of concurrent
clients. Each phase stops after a request count or a time limit, whichever comes first.

    .venv/bin/python bench/routing_bench.py            # about 30 s
    .venv/bin/python bench/routing_bench.py --quick    # about 10 s
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import orjson
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.model_table import ModelConfig, ModelTable, RoutingConfig
from gateway.observability.metrics import Metrics
from gateway.proxy.upstream import Upstream
from gateway.routing.endpoint import Endpoint
from gateway.routing.load import Load, apply_load
from gateway.routing.monitor import Monitor
from gateway.routing.policy import (
    POLICIES,
    EndpointView,
    Policy,
    RouteRequest,
)
from gateway.routing.router import Router
from gateway.worker.client import WorkerClient
from tests.routing.worker import ProgrammableWorker
from tests.servers import listening_socket

FAST_S = 0.02
SLOW_S = FAST_S * 5
CAPACITY = 4
CONCURRENCY = 24


def round_robin_policy() -> Policy:
    """Round-robin in the policies' shape (its counter is the only state, kept in the closure)."""
    turn = itertools.count()

    def pick(candidates: Sequence[EndpointView], request: RouteRequest, rng: random.Random) -> EndpointView:
        return candidates[next(turn) % len(candidates)]

    return pick


async def _serve(worker: ProgrammableWorker) -> tuple[uvicorn.Server, str, asyncio.Task[None]]:
    sock = listening_socket()
    config = uvicorn.Config(
        worker.app(), log_level="warning", log_config=None, access_log=False, lifespan="off"
    )
    server = uvicorn.Server(config)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110 -- uvicorn offers no event for it
        await asyncio.sleep(0.01)
    return server, f"http://127.0.0.1:{sock.getsockname()[1]}", task


async def _phase(name: str, policy: Policy | None, requests: int, limit_s: float) -> dict[str, float]:
    workers = [ProgrammableWorker(("m",), delay_s=FAST_S, capacity=CAPACITY) for _ in range(3)]
    workers.append(ProgrammableWorker(("m",), delay_s=SLOW_S, capacity=CAPACITY))
    served = [await _serve(w) for w in workers]
    model = ModelConfig(
        name="m", endpoints=tuple(url for _, url, _ in served), routing=RoutingConfig(policy="least_loaded")
    )
    router = Router(ModelTable((model,)), Metrics(), rng=random.Random(7))
    if policy is not None:
        for pool in router.pools():
            pool.use_policy(policy)
    session = WorkerClient()
    monitor = Monitor(router, session)
    monitor.start()
    upstream = Upstream(session, router, router.metrics)
    route = router.resolve("m")
    assert route is not None
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    headers = {"content-type": "application/json"}
    latencies: list[float] = []
    remaining = itertools.count()
    loop = asyncio.get_running_loop()
    await asyncio.sleep(1.2)  # one scrape round, as a running gateway would have had
    started = loop.time()
    stop_at = started + limit_s

    async def client() -> None:
        while next(remaining) < requests and loop.time() < stop_at:
            t0 = loop.time()
            response = await upstream.open(
                router.plan(route),
                "/v1/chat/completions",
                lambda pool: body,
                headers,
                RouteRequest("m"),
                head_deadline=t0 + 30,
                stream=False,
            )
            while await response.response.content.readany():
                pass
            response.release()
            latencies.append(loop.time() - t0)

    await asyncio.gather(*(client() for _ in range(CONCURRENCY)))
    elapsed = loop.time() - started
    await monitor.stop()
    await upstream.aclose()
    await session.aclose()
    for server, _, task in served:
        server.should_exit = True
        await task
    latencies.sort()
    share = workers[-1].requests / max(sum(w.requests for w in workers), 1)
    result = {
        "requests": len(latencies),
        "p50_ms": 1000 * statistics.median(latencies),
        # With a closed loop of clients, the mean is what throughput trades against (Little's law):
        # a policy that drains the slow worker raises the median of the fast ones' queues.
        "mean_ms": 1000 * statistics.fmean(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
        "rps": len(latencies) / elapsed,
        "slow_share": share,
    }
    print(
        f"{name:>14}: {result['requests']:5.0f} requests  p50 {result['p50_ms']:7.1f} ms  "
        f"mean {result['mean_ms']:7.1f} ms  "
        f"p99 {result['p99_ms']:7.1f} ms  {result['rps']:7.1f} req/s  "
        f"slow endpoint got {100 * share:4.1f} %",
        flush=True,
    )
    return result


def _decision_time(iterations: int) -> None:
    rng = random.Random(1)
    for size in (4, 16):
        endpoints = [Endpoint(f"http://10.0.{i // 250}.{i % 250}:8000") for i in range(size)]
        for i, ep in enumerate(endpoints):
            apply_load(ep, Load(running=i % 5, waiting=i % 2, kv_cache_usage=0.1 * (i % 10)), now=0)
            ep.inflight = i % 3
        requests = [RouteRequest("m", user=f"user-{i}") for i in range(256)]
        for name, policy in [*POLICIES.items(), ("round_robin", round_robin_policy())]:
            t0 = time.perf_counter()
            for i in range(iterations):
                policy(endpoints, requests[i & 255], rng)
            per_call = (time.perf_counter() - t0) / iterations
            print(f"  decision {name:>17}, {size:2d} endpoints: {per_call * 1e6:6.2f} us", flush=True)
    model = ModelConfig(name="m", endpoints=tuple(f"http://10.0.0.{i}:8000" for i in range(16)))
    router = Router(ModelTable((model,)), Metrics(), rng=rng)
    pool = next(router.pools())
    t0 = time.perf_counter()
    for i in range(iterations):
        got = pool.try_acquire(requests[i & 255], rng)
        assert got is not None
        pool.release(got[0])
    per_call = (time.perf_counter() - t0) / iterations
    print(f"  full pick (filter + policy + metric + release), 16 endpoints: {per_call * 1e6:6.2f} us")


async def _main(quick: bool) -> None:
    requests, limit_s = (800, 8.0) if quick else (3000, 20.0)
    print(
        f"4 workers ({CAPACITY} slots each; 3 answer in {FAST_S * 1000:.0f} ms, one in "
        f"{SLOW_S * 1000:.0f} ms), {CONCURRENCY} concurrent clients, up to {requests} requests "
        f"or {limit_s:.0f} s per policy",
        flush=True,
    )
    rr = await _phase("round_robin", round_robin_policy(), requests, limit_s)
    ll = await _phase("least_loaded", None, requests, limit_s)
    print(
        f"least_loaded vs round_robin: p99 {rr['p99_ms'] / ll['p99_ms']:.1f}x better, "
        f"mean {rr['mean_ms'] / ll['mean_ms']:.1f}x better, p50 {rr['p50_ms'] / ll['p50_ms']:.1f}x, "
        f"throughput {ll['rps'] / rr['rps']:.1f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a short run (about 10 s)")
    args = parser.parse_args()
    asyncio.run(_main(args.quick))
    print("routing decision time (per call):")
    _decision_time(20_000 if args.quick else 200_000)


if __name__ == "__main__":
    main()
