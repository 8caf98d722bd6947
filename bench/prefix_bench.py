"""The costs of prefix-cache routing: memory per index block, the routing decision for a 32 KB
prompt, and how stale one replica's view of another's index is through Redis.

    .venv/bin/python bench/prefix_bench.py          # about 20 s; starts its own redis-server

1. bytes per block: tracemalloc over an index of 100,000 blocks (one holder each, the common case)
   and over one whose blocks have 4 holders each;
2. decision time: what the request path adds for a prefix-routed request with a 32 KB prompt:
   hashing the prompt once from the worker body (gateway.routing.prefix.body_blocks), then the
   pool's pick (index lookup + policy + index record), over 16 endpoints and a full index;
3. staleness: replica A records a chain, replica B's index has it some time later (both sharing
   every 50 ms, the default): p50/p99/max over 200 chains.
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import orjson
from redis.asyncio import Redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.model_table import ModelConfig, ModelTable, RoutingConfig
from gateway.observability.metrics import Metrics
from gateway.routing.load import Load, apply_load
from gateway.routing.policy import RouteRequest
from gateway.routing.prefix import DEFAULT_BLOCK_BYTES, PrefixIndex, block_hashes, body_blocks
from gateway.routing.prefix_share import PrefixShare
from gateway.routing.prefix_store import PrefixStore
from gateway.routing.router import Router


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bytes_per_block() -> None:
    urls = [f"http://10.0.0.{i}:8000" for i in range(16)]
    for holders in (1, 4):
        chains = [block_hashes(os.urandom(64 * 100), 64) for _ in range(1000)]
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        index = PrefixIndex(1_000_000)
        for i, chain in enumerate(chains):
            for h in range(holders):
                index.record(chain, urls[(i + h) % 16])
        used = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        # The chains' own hash bytes are shared with the index's keys: count them in, as a
        # request's blocks are what the index keeps.
        print(f"  {len(index):7d} blocks, {holders} holder(s) each: {used / len(index):6.0f} bytes/block")


def decision_time(iterations: int) -> None:
    rng = random.Random(3)
    urls = tuple(f"http://10.0.{i // 250}.{i % 250}:8000" for i in range(16))
    model = ModelConfig(name="m", endpoints=urls, routing=RoutingConfig(policy="prefix_affinity"))
    router = Router(ModelTable((model,)), Metrics(), rng=rng)
    pool = next(router.pools())
    for i, endpoint in enumerate(pool.endpoints):
        apply_load(endpoint, Load(running=i % 5, waiting=0, kv_cache_usage=0.1 * (i % 10)), now=0)
    # A full index of other traffic (200,000 blocks, the default bound).
    for i in range(2000):
        router.prefix_index.record(block_hashes(os.urandom(64 * 100), 64), urls[i % 16])
    system = "You are a helpful assistant. " * 40
    bodies = []
    for i in range(64):
        history = secrets.token_hex(16 * 1024 - 600)  # 32 KB of prompt in all
        messages = [{"role": "system", "content": system}, {"role": "user", "content": f"{i} {history}"}]
        bodies.append(orjson.dumps({"model": "m", "messages": messages}))
    # Wall time, and this thread's CPU time: on a shared machine the wall time's tail is mostly
    # other processes holding the core, which the CPU time leaves out.
    walls: dict[str, list[float]] = {"hash once": [], "pick (lookup+policy+record)": [], "total": []}
    cpus: dict[str, list[float]] = {name: [] for name in walls}
    blocks: tuple[bytes, ...] = ()
    for i in range(iterations):
        body = bodies[i % len(bodies)]
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        blocks = body_blocks(body, DEFAULT_BLOCK_BYTES)
        c1, t1 = time.thread_time_ns(), time.perf_counter_ns()
        got = pool.try_acquire(RouteRequest("m", blocks=blocks), rng)
        c2, t2 = time.thread_time_ns(), time.perf_counter_ns()
        assert got is not None
        pool.release(got[0])
        for name, (wall_ns, cpu_ns) in zip(
            walls, ((t1 - t0, c1 - c0), (t2 - t1, c2 - c1), (t2 - t0, c2 - c0)), strict=True
        ):
            walls[name].append(wall_ns / 1e9)
            cpus[name].append(cpu_ns / 1e9)
    print(
        f"  32 KB prompt, {len(blocks)} blocks of {DEFAULT_BLOCK_BYTES} bytes, 16 endpoints, "
        f"{iterations} requests (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs):"
    )
    for name, wall in walls.items():
        cpu = cpus[name]
        print(
            f"    {name:>28}: wall p50 {1e6 * statistics.median(wall):6.1f} us  "
            f"p99 {1e6 * _pct(wall, 0.99):6.1f} us   CPU p50 {1e6 * statistics.median(cpu):6.1f} us  "
            f"p99 {1e6 * _pct(cpu, 0.99):6.1f} us"
        )


async def staleness(samples: int) -> None:
    with EmbeddedRedis() as server:
        redis = Redis.from_url(server.url)
        a_index, b_index = PrefixIndex(1_000_000), PrefixIndex(1_000_000)
        key = "sg:{prefix-bench}:log"
        a = PrefixShare(PrefixStore(redis, key=key), a_index, Metrics(), interval_s=0.05, timeout_s=2.0)
        b = PrefixShare(PrefixStore(redis, key=key), b_index, Metrics(), interval_s=0.05, timeout_s=2.0)
        a.start()
        b.start()
        lags: list[float] = []
        loop = asyncio.get_running_loop()
        try:
            for _ in range(samples):
                chain = block_hashes(os.urandom(64 * 40), 64)
                t0 = loop.time()
                a_index.record(chain, "http://a:1")
                a.note("http://a:1", chain)
                while b_index.known_length(chain, "http://a:1") < len(chain):  # noqa: ASYNC110 -- a poll is the measurement
                    await asyncio.sleep(0.001)
                lags.append(loop.time() - t0)
                await asyncio.sleep(random.random() * 0.05)  # land anywhere in the interval
        finally:
            await a.stop()
            await b.stop()
            await redis.aclose()
        print(
            f"  {samples} chains, share interval 50 ms: p50 {1000 * statistics.median(lags):5.1f} ms  "
            f"p99 {1000 * _pct(lags, 0.99):5.1f} ms  max {1000 * max(lags):5.1f} ms"
        )


def main() -> None:
    print("bytes per index block:", flush=True)
    bytes_per_block()
    print("routing decision:", flush=True)
    decision_time(2000)
    print("staleness between two replicas through Redis:", flush=True)
    asyncio.run(staleness(200))


if __name__ == "__main__":
    main()
