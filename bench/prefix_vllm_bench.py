"""Prefix-cache routing in front of two REAL vLLMs (CPU build, tiny model, prefix caching on):
the engines' prefix-cache hit rate and the time to first token, for an oracle that always picks
the right engine, prefix_affinity and least_loaded, on the workload of tests/vllm/prefix_workload.py
(6 conversations over 2 shared system prompts, 4 turns each, one request at a time).

The gateway's own Router, Monitor and Upstream route in this process (no Redis needed); the oracle
sends straight to its engine, so its TTFT lacks the gateway's ~1 ms. Starts both vLLMs itself
(about a minute each) unless SLUICEGATE_VLLM_URLS=url1,url2 names running ones.

    .venv/bin/python bench/prefix_vllm_bench.py
    .venv/bin/python bench/prefix_vllm_bench.py --isolation   # per-team salts vs shared

`--isolation` runs the workload for two teams through one gateway's routing (one prefix index
for both, as a gateway has), salted per team and then shared, and measures cross-team reuse
directly: fresh teams each send one of the first team's conversations as it ended, so any hit
they get is on blocks another team cached (vLLM's counters cannot say whose blocks a hit used).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.model_table import ModelConfig, ModelTable, RoutingConfig
from gateway.observability.metrics import Metrics
from gateway.proxy.cache_salt import derive
from gateway.proxy.upstream import Upstream
from gateway.routing.monitor import Monitor
from gateway.routing.policy import RouteRequest
from gateway.routing.prefix import DEFAULT_BLOCK_BYTES, body_blocks
from gateway.routing.router import Router
from gateway.worker.client import WorkerClient
from tests.vllm.prefix_workload import MAX_TOKENS, SERVED_NAME, Oracle, hit_rate, run_workload, two_vllms

T = TypeVar("T")
HEADERS = {"content-type": "application/json"}


class Loop:
    """An event loop in a thread: the workload driver is plain code, the routing is async."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()


def _body(messages: list[dict[str, str]], cache_salt: str | None = None) -> bytes:
    body: dict[str, Any] = {
        "model": SERVED_NAME,
        "messages": messages,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": True,
    }
    if cache_salt is not None:
        body["cache_salt"] = cache_salt  # as the gateway sets it (gateway/proxy/cache_salt.py)
    return orjson.dumps(body)


async def _read(readany: Callable[[], Awaitable[bytes]], t0: float, ttft: list[float]) -> str:
    """The streamed answer's text; appends the time to its first chunk to `ttft` (vLLM sends it
    with the first token; the tiny model's random weights make many tokens decode to nothing, so
    the first non-empty text would time the weights, not the engine)."""
    loop = asyncio.get_running_loop()
    parts: list[str] = []
    first = True
    pending = b""
    while chunk := await readany():
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            if not line.startswith(b"data: {"):
                continue
            if first:
                ttft.append(loop.time() - t0)
                first = False
            choices = orjson.loads(line[6:]).get("choices") or [{}]
            parts.append(choices[0].get("delta", {}).get("content") or "")
    return "".join(parts)


class Gateway:
    """One gateway's routing (Router with its prefix index, load Monitor, Upstream) in `loop`: a
    run that compares teams sends them all through one, as they would share one gateway (a
    Router per team would route each team blind to the blocks the others cached)."""

    def __init__(self, urls: list[str], loop: Loop, policy: str | None) -> None:
        self.policy = policy
        self.oracle = Oracle(urls)
        self._loop = loop
        self.router, self.monitor, self.session, self.upstream = loop.run(self._setup(urls))

    async def _setup(self, urls: list[str]) -> tuple[Router, Monitor, aiohttp.ClientSession, Upstream]:
        routing = RoutingConfig(policy=self.policy or "least_loaded")
        router = Router(
            ModelTable((ModelConfig(name=SERVED_NAME, endpoints=tuple(urls), routing=routing),)), Metrics()
        )
        # The oracle's direct calls: a plain aiohttp session (a bench client, not the gateway's).
        session = aiohttp.ClientSession()
        workers = WorkerClient()
        monitor = Monitor(router, workers)
        monitor.start()
        await asyncio.sleep(1.2)  # a scrape round
        return router, monitor, session, Upstream(workers, router, router.metrics)

    async def send(self, conversation: str, body: bytes, ttft: list[float]) -> str:
        """The answer's text; the oracle (policy None) sends straight to its engine."""
        t0 = asyncio.get_running_loop().time()
        if self.policy is None:
            messages = orjson.loads(body)["messages"]
            url = self.oracle.pick(conversation, messages) + "/v1/chat/completions"
            async with self.session.post(url, data=body, headers=HEADERS) as direct:
                return await _read(direct.content.readany, t0, ttft)
        route = self.router.resolve(SERVED_NAME)
        assert route is not None
        # Hashed with its cache_salt, as the pipeline hashes the body the worker gets.
        blocks = body_blocks(body, DEFAULT_BLOCK_BYTES) if self.policy == "prefix_affinity" else ()
        opened = await self.upstream.open(
            self.router.plan(route),
            "/v1/chat/completions",
            lambda pool: body,
            HEADERS,
            RouteRequest(SERVED_NAME, blocks=blocks),
            head_deadline=t0 + 120,
            stream=True,
        )
        try:
            return await _read(opened.response.content.readany, t0, ttft)
        finally:
            opened.served()
            opened.release()

    def close(self) -> None:
        async def teardown() -> None:
            await self.monitor.stop()
            await self.upstream.aclose()
            await self.session.close()

        self._loop.run(teardown())


def _measure(
    name: str,
    urls: list[str],
    loop: Loop,
    policy: str | None,
    *,
    text: str | None = None,
    cache_salt: str | None = None,
    gateway: Gateway | None = None,
    ended: dict[str, list[dict[str, str]]] | None = None,
) -> tuple[float, list[float]]:
    """`text`: the workload's seed (the same seed, the same prompts); `cache_salt`: what every
    request carries, as the gateway would set it for one team; `gateway`: the routing to send
    through (default: a fresh one, closed after); `ended`: filled with each conversation's last
    request's messages."""
    ttft: list[float] = []
    salt = text or f"bench-{name}-{random.randrange(1 << 30)}"
    through = gateway or Gateway(urls, loop, policy)

    def send(conversation: str, messages: list[dict[str, str]]) -> str:
        if ended is not None:
            ended[conversation] = list(messages)
        return loop.run(through.send(conversation, _body(messages, cache_salt), ttft))

    try:
        rate = hit_rate(urls, lambda: run_workload(send, salt))
    finally:
        if gateway is None:
            through.close()
    return rate, ttft


def _cross_team(
    urls: list[str],
    loop: Loop,
    gateway: Gateway,
    secret: bytes,
    mode: str,
    ended: dict[str, list[dict[str, str]]],
) -> float:
    """The hit rate of fresh teams, one per conversation, each sending that conversation's last
    request as team A sent it: hits on blocks no request of theirs cached (a probe's system prompt
    another probe sent too was cached by team A first)."""

    def probes() -> None:
        for i, (conversation, messages) in enumerate(ended.items()):
            salt = derive(secret, mode, team_id=f"team_probe_{i}", key_id="", client=None)
            loop.run(gateway.send(conversation, _body(messages, salt), []))

    return hit_rate(urls, probes)


def _isolation(urls: list[str], loop: Loop) -> None:
    """Two teams send the same workload (the same system prompts and turns), one after the other,
    through one gateway's prefix_affinity: with per-team salts (the default) and with none
    (`shared`). Team B's hit rate above team A's is about what it reused of A's blocks (routing
    draws make it noisy); the cross-team hit rate is measured directly (`_cross_team`)."""
    secret = b"bench-secret-" + random.randbytes(16).hex().encode()
    print(f"{'':>10} | team A hit rate | team B hit rate | B - A    | cross-team hit rate")
    for mode in ("team", "shared"):
        text = f"bench-isolation-{mode}-{random.randrange(1 << 30)}"
        gateway = Gateway(urls, loop, "prefix_affinity")
        try:
            rates = []
            ended: dict[str, list[dict[str, str]]] = {}
            for team in ("a", "b"):
                salt = derive(secret, mode, team_id=f"team_{team}", key_id="", client=None)
                rates.append(
                    _measure(
                        f"{mode}-{team}",
                        urls,
                        loop,
                        "prefix_affinity",
                        text=text,
                        cache_salt=salt,
                        gateway=gateway,
                        ended=ended if team == "a" else None,
                    )[0]
                )
            cross = _cross_team(urls, loop, gateway, secret, mode, ended)
        finally:
            gateway.close()
        a, b = (100 * r for r in rates)
        print(f"{mode:>10} | {a:13.1f} % | {b:13.1f} % | {b - a:6.1f} % | {100 * cross:17.1f} %")


def main() -> None:
    loop = Loop()
    try:
        with two_vllms() as urls:
            _measure("warm-up", urls, loop, "least_loaded")  # first requests to a fresh engine are slow
            if "--isolation" in sys.argv:
                _isolation(urls, loop)
                return
            results = {
                "oracle": _measure("oracle", urls, loop, None),
                "prefix_affinity": _measure("prefix", urls, loop, "prefix_affinity"),
                "least_loaded": _measure("least-loaded", urls, loop, "least_loaded"),
            }
    finally:
        loop.close()
    best = results["oracle"][0]
    print(f"{'':>16} | engine prefix-cache hit rate | of the oracle's | TTFT p50 ms | TTFT p99 ms")
    for name, (rate, ttft) in results.items():
        p99 = sorted(ttft)[int(0.99 * (len(ttft) - 1))]
        print(
            f"{name:>16} | {100 * rate:26.1f} % | {100 * rate / best:13.1f} % | "
            f"{1000 * statistics.median(ttft):11.1f} | {1000 * p99:11.1f}"
        )


if __name__ == "__main__":
    main()
