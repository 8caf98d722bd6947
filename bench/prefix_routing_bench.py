"""Prefix-cache routing against the other policies, on simulated engines with a KV cache.

Four engines (tests/routing/kv_worker.py: an LRU of 16-token blocks, TTFT = a + b x uncached
tokens, time per token growing with the batch) behind the gateway's own Router, Monitor (load scrape) and
Upstream, all in one event loop; the prompt blocks are hashed as the pipeline does
(gateway.routing.prefix.body_blocks). Two workloads, each run for every policy:

- shared: 8 system prompts (~600 tokens) and multi-turn conversations (8 turns, each ~60 tokens
  from the user and 96 from the engine, 0.1-0.6 s apart); TTFT is the first streamed token as the
  client sees it;
- unique: single prompts that share nothing (~1,500 random tokens);
- agent: coding-agent sessions (gateway/routing/session.py): one large prefix every session shares
  (~3,000 tokens of system prompt and tool definitions, as Claude Code's or Codex's), then
  growing turns (each ~40 tokens from the user plus a ~200-token tool result), several sessions at
  once, each sending its session id as an agent does; `same engine` is the share of follow-up
  turns served by the engine that served the session's previous turn.

prefix_affinity runs with several `max_extra_load` values: the sweep behind the default.

`--isolation`: what per-team cache salts cost. The shared workload through prefix_affinity, its
users in TEAMS teams, twice: each team's requests carrying the `cache_salt` the gateway derives
for it (`cache_isolation: team`, the default), then none (`shared`). The engines count, per team
(a bench-only header names it), prompt tokens, hits, and cross-team hits (on blocks only other
teams' requests had cached); the prompts are hashed for routing with the salt, as the pipeline does.

    .venv/bin/python bench/prefix_routing_bench.py           # about 2 minutes
    .venv/bin/python bench/prefix_routing_bench.py --quick   # about 1 minute
    .venv/bin/python bench/prefix_routing_bench.py --quick --workload agent
    .venv/bin/python bench/prefix_routing_bench.py --quick --isolation   # about 1 minute
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.model_table import HealthConfig, ModelConfig, ModelTable, PrefixConfig, RoutingConfig
from gateway.observability.metrics import Metrics
from gateway.proxy.cache_salt import derive
from gateway.proxy.upstream import Upstream
from gateway.routing.monitor import Monitor
from gateway.routing.policy import RouteRequest
from gateway.routing.prefix import DEFAULT_BLOCK_BYTES, body_blocks
from gateway.routing.router import Router
from gateway.worker.client import WorkerClient
from tests.routing.kv_worker import TENANT_HEADER, KVCacheWorker, TenantCounters
from tests.servers import listening_socket

ENGINES = 4
USERS = 48
# Between two turns a user reads and types. Without it a closed loop is accidentally sticky: the
# engine that just answered has just freed a slot, so it is the least loaded one for the next turn.
THINK_S = (0.1, 0.6)
DEFAULT_THRESHOLD = PrefixConfig().max_extra_load
TURNS = 8
NEW_TOKENS = 60  # a user's message; the engine answers OUTPUT_TOKENS
OUTPUT_TOKENS = 96
SYSTEM_PROMPTS = 8
AGENT_PREFIX_TOKENS = 3000  # an agent's system prompt and tools: the same for every session
TOOL_RESULT_TOKENS = 200
WORDS = [f"w{i:03d}" for i in range(1000)]  # ~1 token each (4 bytes + a space ~ 1.25 tokens)
TEAMS = 4  # --isolation: user n is in team n % TEAMS
SALT_SECRET = b"bench-cache-salt-secret-" + b"s" * 32


def _answer(stream: bytes) -> str:
    parts = []
    for line in stream.split(b"\n"):
        if line.startswith(b"data: {"):
            choices = orjson.loads(line[6:]).get("choices") or [{}]
            parts.append(choices[0].get("delta", {}).get("content") or "")
    return "".join(parts)


def _text(rng: random.Random, tokens: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(int(tokens * 0.8)))


@dataclass
class Result:
    ttft: list[float] = field(default_factory=list)
    requests: int = 0
    elapsed: float = 0.0
    hit_tokens: int = 0
    query_tokens: int = 0
    follow_ups: int = 0  # turns after a conversation's first
    same_engine: int = 0  # of those, served by the engine that served the turn before
    teams: dict[str, TenantCounters] = field(default_factory=dict)  # --isolation: summed over engines

    def merged(self, other: Result) -> Result:
        return Result(
            self.ttft + other.ttft,
            self.requests + other.requests,
            self.elapsed + other.elapsed,
            self.hit_tokens + other.hit_tokens,
            self.query_tokens + other.query_tokens,
            self.follow_ups + other.follow_ups,
            self.same_engine + other.same_engine,
            _sum_teams([self.teams, other.teams]),
        )

    def row(self, name: str) -> str:
        t = sorted(self.ttft)
        p50, p99 = statistics.median(t), t[int(0.99 * (len(t) - 1))]
        hit = self.hit_tokens / max(self.query_tokens, 1)
        same = f"{100 * self.same_engine / self.follow_ups:6.1f} %" if self.follow_ups else f"{'-':>8}"
        return (
            f"{name:>33} | {self.requests:6d} | {self.requests / self.elapsed:7.1f} | {1000 * p50:8.1f} | "
            f"{1000 * p99:8.1f} | {100 * hit:6.1f} % | {same}"
        )


def _sum_teams(parts: list[dict[str, TenantCounters]]) -> dict[str, TenantCounters]:
    out: dict[str, TenantCounters] = {}
    for part in parts:
        for team, c in part.items():
            total = out.setdefault(team, TenantCounters())
            total.query_tokens += c.query_tokens
            total.hit_tokens += c.hit_tokens
            total.cross_hit_tokens += c.cross_hit_tokens
    return out


HEADER = (
    f"{'policy':>33} | {'reqs':>6} | {'req/s':>7} | {'TTFT p50':>8} | {'TTFT p99':>8} | engine hits | "
    f"same engine\n{'':>33} | {'':>6} | {'':>7} | {'ms':>8} | {'ms':>8} |"
)


async def _serve(app: Any) -> tuple[uvicorn.Server, str, asyncio.Task[None]]:
    sock = listening_socket()
    config = uvicorn.Config(app, log_level="warning", log_config=None, access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110 -- uvicorn offers no event for it
        await asyncio.sleep(0.01)
    return server, f"http://127.0.0.1:{sock.getsockname()[1]}", task


async def _phase(
    policy: str, max_extra_load: float, workload: str, rounds: int, seed: int, isolation: str | None = None
) -> Result:
    """`rounds`: conversations per user (shared), or requests per user (unique). `isolation`: the
    users are in TEAMS teams, each team's requests salted as a model of that `cache_isolation`
    would have the gateway salt them."""
    engines = [
        KVCacheWorker(
            cache_blocks=2048, output_tokens=OUTPUT_TOKENS, decode_base_s=0.002, decode_per_seq_s=0.00025
        )
        for _ in range(ENGINES)
    ]
    served = [await _serve(e.app()) for e in engines]
    routing = RoutingConfig(policy=policy, prefix=PrefixConfig(max_extra_load=max_extra_load))
    model = ModelConfig(
        name="m",
        endpoints=tuple(url for _, url, _ in served),
        routing=routing,
        health=HealthConfig(probe_interval=1.0),  # scraped every second, as by default
    )
    router = Router(ModelTable((model,)), Metrics(), rng=random.Random(seed))
    session = WorkerClient()
    monitor = Monitor(router, session)
    monitor.start()
    upstream = Upstream(session, router, router.metrics)
    route = router.resolve("m")
    assert route is not None
    prefix = policy == "prefix_affinity"
    headers = {"content-type": "application/json"}
    loop = asyncio.get_running_loop()
    rng = random.Random(seed)
    systems = [f"System prompt {i}. " + _text(rng, 600) for i in range(SYSTEM_PROMPTS)]
    agent_prefix = "You are a coding agent. Tools: " + _text(rng, AGENT_PREFIX_TOKENS)
    result = Result()
    await asyncio.sleep(0.6)  # a scrape round, as a running gateway would have had
    started = loop.time()

    async def send(
        messages: list[dict[str, str]], user: str, *, session: bool = False, team: str = ""
    ) -> tuple[str, str]:
        """Sends one turn; returns the answer's text (the next turn's history) and the engine's
        URL. `session`: `user` is an agent's session id (a header), as the pipeline reads it."""
        payload: dict[str, Any] = {"model": "m", "messages": messages, "stream": True}
        salt = derive(SALT_SECRET, isolation, team_id=team, key_id="", client=None) if isolation else None
        if salt is not None:
            payload["cache_salt"] = salt  # what the pipeline adds, and hashes for routing
        body = orjson.dumps(payload)
        blocks = body_blocks(body, DEFAULT_BLOCK_BYTES) if prefix else ()
        t0 = loop.time()
        response = await upstream.open(
            router.plan(route),
            "/v1/chat/completions",
            lambda pool: body,
            {**headers, TENANT_HEADER: team} if team else headers,
            RouteRequest("m", session_id=user, team="bench", blocks=blocks)
            if session
            else RouteRequest("m", user=user, blocks=blocks),
            head_deadline=t0 + 60,
            stream=True,
        )
        first = await response.response.content.readany()
        result.ttft.append(loop.time() - t0)
        assert first.startswith(b"data: ")
        response.served()
        rest = b""
        while part := await response.response.content.readany():
            rest += part
        response.release()
        result.requests += 1
        return _answer(first + rest), response.endpoint.url

    async def user(n: int) -> None:
        own = random.Random(seed * 1000 + n)
        team = f"team-{n % TEAMS}" if isolation else ""
        for conversation in range(rounds):
            name = f"u{n}-c{conversation}"
            if workload == "unique":
                await send([{"role": "user", "content": f"{name} " + _text(own, 1500)}], name)
                await asyncio.sleep(own.uniform(*THINK_S))
                continue
            agent = workload == "agent"
            messages = [{"role": "system", "content": agent_prefix if agent else own.choice(systems)}]
            previous = None
            for turn in range(TURNS):
                said = f"{name} turn {turn}: " + _text(own, 40 if agent else NEW_TOKENS)
                if agent and turn:
                    said += " tool result: " + _text(own, TOOL_RESULT_TOKENS)
                messages.append({"role": "user", "content": said})
                answer, engine = await send(messages, name, session=agent, team=team)
                if previous is not None:
                    result.follow_ups += 1
                    result.same_engine += engine == previous
                previous = engine
                await asyncio.sleep(own.uniform(*THINK_S))
                messages.append({"role": "assistant", "content": answer})

    await asyncio.gather(*(user(n) for n in range(USERS)))
    result.elapsed = loop.time() - started
    result.hit_tokens = sum(e.hit_tokens for e in engines)
    result.query_tokens = sum(e.query_tokens for e in engines)
    result.teams = _sum_teams([e.tenants for e in engines])
    await monitor.stop()
    await upstream.aclose()
    await session.aclose()
    for server, _, task in served:
        server.should_exit = True
        await task
    return result


async def _main(rounds: int, sweep: list[float], workloads: list[str]) -> None:
    print(
        f"{ENGINES} simulated engines (8 running each, 2,048-block KV cache; TTFT 4 ms + 0.2 ms per "
        f"uncached token; 2 ms + 0.25 ms x batch per output token), {USERS} users; shared: "
        f"{rounds} conversations of {TURNS} turns each per user, unique: {8 * rounds} prompts each",
        flush=True,
    )
    for workload in workloads:
        print(f"\nworkload: {workload}\n{HEADER}", flush=True)
        runs: dict[str, Result] = {}
        policies = [("least_outstanding", 0.0), ("least_loaded", 0.0), ("session_affinity", 0.0)]
        policies += [("prefix_affinity", t) for t in sweep]
        if workload == "agent":
            policies = [
                ("least_loaded", 0.0),
                ("session_affinity", 0.0),
                ("prefix_affinity", DEFAULT_THRESHOLD),
            ]
        if workload == "unique":
            # The two make the same choices here: what differs is noise, so each runs twice,
            # interleaved, and the comparison is of the pooled runs.
            policies = [("least_loaded", 0.0), ("prefix_affinity", DEFAULT_THRESHOLD)] * 2
        for policy, threshold in policies:
            name = policy if policy != "prefix_affinity" else f"prefix_affinity ({threshold:g})"
            count = 8 * rounds if workload == "unique" else rounds
            run = await _phase(policy, threshold, workload, count, seed=11)
            print(run.row(name), flush=True)
            runs[name] = runs[name].merged(run) if name in runs else run
        if workload == "unique":
            for name, run in runs.items():
                print(run.row(name + " pooled"))
        base = runs["least_loaded"]
        b50, b99 = statistics.median(base.ttft), sorted(base.ttft)[int(0.99 * (len(base.ttft) - 1))]
        for name, run in runs.items():
            if name.startswith("prefix_affinity"):
                p50 = statistics.median(run.ttft)
                p99 = sorted(run.ttft)[int(0.99 * (len(run.ttft) - 1))]
                rate = (run.requests / run.elapsed) / (base.requests / base.elapsed)
                print(
                    f"  {name} vs least_loaded: TTFT p50 {b50 / p50:.2f}x better, p99 {b99 / p99:.2f}x "
                    f"better, throughput {100 * (rate - 1):+.1f} %"
                )


async def _isolation(rounds: int) -> None:
    print(
        f"{ENGINES} simulated engines (as below), {USERS} users in {TEAMS} teams, the shared workload "
        f"({SYSTEM_PROMPTS} system prompts every team uses; {rounds} conversation(s) of {TURNS} turns per "
        f"user), prefix_affinity ({DEFAULT_THRESHOLD:g})\n"
        f"{'cache_isolation':>15} | per-team hit rate (min-max) | own blocks | other teams' | "
        f"TTFT p50 | TTFT p99",
        flush=True,
    )
    for mode in ("team", "shared"):
        run = await _phase("prefix_affinity", DEFAULT_THRESHOLD, "shared", rounds, seed=11, isolation=mode)
        rates = [c.hit_tokens / max(c.query_tokens, 1) for c in run.teams.values()]
        queries = sum(c.query_tokens for c in run.teams.values())
        hits = sum(c.hit_tokens for c in run.teams.values())
        cross = sum(c.cross_hit_tokens for c in run.teams.values())
        t = sorted(run.ttft)
        print(
            f"{mode:>15} | {100 * hits / queries:9.1f} % ({100 * min(rates):.1f}-{100 * max(rates):.1f} %) | "
            f"{100 * (hits - cross) / queries:8.1f} % | {100 * cross / queries:10.1f} % | "
            f"{1000 * statistics.median(t):5.1f} ms | {1000 * t[int(0.99 * (len(t) - 1))]:5.0f} ms",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1 conversation per user instead of 2")
    parser.add_argument("--sweep", default="2,8,32", help="max_extra_load values for prefix_affinity")
    parser.add_argument("--workload", default="shared,unique,agent", help="which workloads, comma-separated")
    parser.add_argument("--isolation", action="store_true", help="per-team cache salts against none, alone")
    args = parser.parse_args()
    if args.isolation:
        asyncio.run(_isolation(1 if args.quick else 2))
        return
    sweep = [float(v) for v in args.sweep.split(",")]
    asyncio.run(_main(1 if args.quick else 2, sweep, args.workload.split(",")))


if __name__ == "__main__":
    main()
