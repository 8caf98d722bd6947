"""Fair share benchmark: the request-count queue (`fairness: requests`, the baseline) against token
fair share with counters in Redis (`fairness: tokens`), in the same run.

Three real gateway processes (`python -m gateway serve`) share a Redis of their own and front one
worker (tests/routing/token_worker.py) whose service takes time proportional to each request's
tokens (input + 2 x output). Per fairness mode:

  weights      teams of weight 1, 2 and 4, equal requests, all queued on every replica first:
               each team's share of the tokens served while all were backlogged (target 1/7,
               2/7, 4/7 within 5 points), and the largest gap between two teams' weighted service
               against the bound (2 x the largest request + one in flight per replica)
  urgent       two teams of weight 1, equal requests, all queued on every replica first; one
               marks every request urgent (a team default_deadline_ms of 5 minutes, so each has a
               deadline and goes first within its team): its share of the tokens served while both
               were backlogged (target 0.5: deadlines order a team's own requests, never its share)
  adversary    two teams of equal weight, one slot per replica; one has 10x the clients (closed
               loops) sending 8x longer prompts: its share of the tokens served (its weighted
               share is 50 %; counting requests, it would be 8 of every 9 tokens)
  one team     one team alone, a closed loop keeping every slot busy: the worker's utilisation
               (busy slot-time / wall time x slots; target >= 95 %)

and, in process against the same Redis, the time from a freed slot to the waiting request's
resumption while three teams wait, each request holding the slot 2 ms (for tokens, Redis chooses
the next request meanwhile), p50 and p99, next to a Redis PING's round trip on the same machine.

    .venv/bin/python bench/fair_share_bench.py            # about a minute
    .venv/bin/python bench/fair_share_bench.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.cli import AdminClient
from gateway.config import Settings
from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.model_table import ModelConfig, RoutingConfig
from gateway.observability.metrics import Metrics
from gateway.redis.breaker import RedisBreaker
from gateway.redis.client import connect_redis
from gateway.routing.policy import RouteRequest
from gateway.routing.pool import Pool
from gateway.routing.share import ShareTicket
from gateway.routing.vtc_store import FairShareStore
from tests.routing.token_worker import TeamLoad, TokenWorker, backlog_everywhere, pool_yaml, while_backlogged
from tests.servers import free_port, run_uvicorn

ROOT = Path(__file__).resolve().parent.parent
REPLICAS = 3
HOLD_S = 0.002  # how long each request holds the slot in the dispatch timing
SECONDS_PER_TOKEN = 20e-6  # a 102-token request takes 2 ms, an 802-token one 16 ms
# One team alone: 1002-token requests of 1 s, so this machine's own CPU is not what limits.
UTILISATION_SECONDS_PER_TOKEN = 1e-3


@contextlib.contextmanager
def gateways(redis_url: str, models: str, folder: Path) -> Iterator[list[tuple[str, AdminClient]]]:
    config = folder / f"models-{secrets.token_hex(3)}.yaml"
    config.write_text(models)
    procs: list[subprocess.Popen[bytes]] = []
    out: list[tuple[str, AdminClient]] = []
    try:
        for i in range(REPLICAS):
            port = free_port()
            token = f"adm-bench-{port}-" + secrets.token_hex(16)
            env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICEGATE_")}
            env.update(
                SLUICEGATE_REDIS_URL=redis_url,
                SLUICEGATE_CONFIG=str(config),
                SLUICEGATE_ADMIN_TOKEN=token,
                SLUICEGATE_HOST="127.0.0.1",
                SLUICEGATE_PORT=str(port),
                SLUICEGATE_SPOOL_PATH=str(folder / f"spool-{port}"),
                SLUICEGATE_SHUTDOWN_DELAY="0",
                SLUICEGATE_LOG_LEVEL="warning",
            )
            log = (folder / f"gw-{i}-{port}.log").open("wb")
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "gateway", "serve"], cwd=ROOT, env=env, stdout=log, stderr=log
                )
            )
            url = f"http://127.0.0.1:{port}"
            out.append((url, AdminClient(url, token)))
        for url, _ in out:
            deadline = time.monotonic() + 30
            while not _answers(url + "/healthz"):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url} did not start (logs in {folder})")
                time.sleep(0.05)
        yield out
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):  # noqa: S310
            return True
    except (urllib.error.URLError, OSError):
        return False


def _team(admin: AdminClient, name: str, weight: int) -> str:
    admin.call("POST", "/admin/v1/teams", {"name": name, "weight": weight})
    return str(admin.call("POST", "/admin/v1/keys", {"team": name})["key"])


def weights_scenario(urls: list[str], admin: AdminClient, worker: TokenWorker, scale: int) -> str:
    weights = {"w1": 1, "w2": 2, "w4": 4}
    teams = {
        n: TeamLoad(_team(admin, n, w), w, per_replica=20 * scale, prompt_tokens=100, max_tokens=1)
        for n, w in weights.items()
    }
    worker.served.clear()
    sent = asyncio.run(backlog_everywhere(urls, teams, worker))
    result = while_backlogged(worker.served, sent, weights, skip=REPLICAS)
    bound = 2 * 102 + REPLICAS * 102
    shares = " ".join(f"{result.shares[n]:.3f}" for n in weights)
    return f"shares {shares} (1/7 2/7 4/7 = 0.143 0.286 0.571)  max gap {result.max_gap:.0f} (bound {bound})"


def urgent_scenario(urls: list[str], admin: AdminClient, worker: TokenWorker, scale: int) -> str:
    admin.call("POST", "/admin/v1/teams", {"name": "urgent", "default_deadline_ms": 300_000})
    urgent = str(admin.call("POST", "/admin/v1/keys", {"team": "urgent"})["key"])
    teams = {
        name: TeamLoad(key, 1, per_replica=20 * scale, prompt_tokens=100, max_tokens=1)
        for name, key in (("urgent", urgent), ("plain", _team(admin, "plain", 1)))
    }
    worker.served.clear()
    sent = asyncio.run(backlog_everywhere(urls, teams, worker))
    result = while_backlogged(worker.served, sent, dict.fromkeys(teams, 1), skip=REPLICAS)
    share = result.shares["urgent"]
    return f"urgent share {share:.3f} of {result.dispatches} requests (0.5: no share gained)"


def closed_loop(
    urls: list[str], worker: TokenWorker, teams: dict[str, tuple[str, int, int]], seconds: float, slots: int
) -> tuple[dict[str, float], float]:
    """Each team's clients (key, clients per replica, prompt tokens) send one request after another
    for `seconds`. Returns each team's tokens served and the worker's utilisation, both over the
    middle half of the run (neither the ramp nor the tail counts)."""

    async def run() -> None:
        stop = time.monotonic() + seconds
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def loop(url: str, replica: int, team: str, key: str, prompt: int) -> None:
                body = {
                    "model": "m",
                    "user": f"{team}|{replica}",
                    "max_tokens": 1,
                    "messages": [{"role": "user", "content": "x" * (4 * prompt)}],
                }
                headers = {"authorization": f"Bearer {key}"}
                while time.monotonic() < stop:
                    async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as r:
                        await r.read()

            await asyncio.gather(
                *(
                    loop(url, i, team, key, prompt)
                    for i, url in enumerate(urls)
                    for team, (key, clients, prompt) in teams.items()
                    for _ in range(clients)
                )
            )

    worker.served.clear()
    begin = time.perf_counter() + seconds / 4
    end = begin + seconds / 2
    asyncio.run(run())
    tokens = dict.fromkeys(teams, 0.0)
    busy = 0.0
    for r in worker.served:
        if begin <= r.started < end:
            tokens[r.team] += r.cost
        busy += max(0.0, min(end, r.started + r.seconds) - max(begin, r.started))
    return tokens, busy / ((end - begin) * slots * REPLICAS)


def adversary_scenario(urls: list[str], admin: AdminClient, worker: TokenWorker, seconds: float) -> str:
    """Both teams always have requests waiting on every replica (one slot each); the adversary has
    10x the clients, each sending 8x longer prompts."""
    teams = {
        "normal": (_team(admin, "normal", 1), 2, 100),
        "adversary": (_team(admin, "adversary", 1), 20, 800),
    }
    tokens, _ = closed_loop(urls, worker, teams, seconds, 1)
    share = tokens["adversary"] / (sum(tokens.values()) or 1.0)
    return f"adversary share {share:.3f} of {sum(tokens.values()):.0f} tokens (weighted share 0.5)"


def utilisation_scenario(
    urls: list[str], admin: AdminClient, worker: TokenWorker, slots: int, seconds: float
) -> str:
    worker.seconds_per_token = UTILISATION_SECONDS_PER_TOKEN
    try:
        # Twice the slots per replica: every slot always has a request waiting for it.
        _, used = closed_loop(
            urls, worker, {"solo": (_team(admin, "solo", 1), 2 * slots, 1000)}, seconds, slots
        )
    finally:
        worker.seconds_per_token = SECONDS_PER_TOKEN
    return f"utilisation {used * 100:.1f} % of {slots * REPLICAS} slots"


async def redis_ping(redis_url: str, count: int) -> tuple[float, float]:
    """A PING's round trip, p50 and p99 (ms): what this machine's Redis and loop cost anyway."""
    redis = connect_redis(Settings(redis_url=redis_url))  # the gateway's own client
    samples = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            await redis.ping()
            samples.append(time.perf_counter() - started)
    finally:
        await redis.aclose()
    samples.sort()
    return statistics.median(samples) * 1e3, samples[int(len(samples) * 0.99)] * 1e3


async def dispatch_latency(redis_url: str, fairness: str, count: int) -> tuple[float, float]:
    """Time from release() to the waiting request's resumption, three teams waiting, one slot held
    HOLD_S by each request (ms, p50 and p99)."""
    redis = connect_redis(Settings(redis_url=redis_url))  # the gateway's own client
    metrics = Metrics()
    routing = RoutingConfig(max_inflight_per_endpoint=1, max_queue=100, fairness=fairness)
    model = ModelConfig(name="lat" + secrets.token_hex(3), endpoints=("http://w",), routing=routing)
    pool = Pool(
        model,
        model.pool_configs()[0],
        metrics,
        rng=random.Random(0),
        fair_share=FairShareStore(redis, RedisBreaker(1.0), metrics, timeout_s=2),
    )
    rng = random.Random(0)
    samples: list[float] = []
    released = 0.0

    def route(team: str) -> RouteRequest:
        return RouteRequest("m", team=team, share=ShareTicket.estimated(team, 1, 5, 100, 1))

    async def client(team: str, n: int) -> None:
        nonlocal released
        for _ in range(n):
            got = pool.try_acquire(route(team), rng) or await pool.acquire(route(team), rng, (), 30)
            if released:
                samples.append(time.perf_counter() - released)
                released = 0.0
            await asyncio.sleep(HOLD_S)  # its "service": Redis's choice of the next is made meanwhile
            released = time.perf_counter()
            pool.release(got[0])

    try:
        await asyncio.gather(client("a", count), client("b", count), client("c", count))
    finally:
        pool.close()
        await redis.aclose()
    samples.sort()
    return statistics.median(samples) * 1e3, samples[int(len(samples) * 0.99)] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    scale = 1 if args.quick else 2
    print(
        f"fair share bench: {REPLICAS} gateway processes, one worker, {SECONDS_PER_TOKEN * 1e6:.0f} us/token"
    )
    with tempfile.TemporaryDirectory() as tmp, EmbeddedRedis(data_dir=tmp) as redis:
        worker = TokenWorker(seconds_per_token=SECONDS_PER_TOKEN)
        with run_uvicorn(worker.app()) as worker_url:
            for db, fairness in enumerate(("requests", "tokens")):
                redis_url = f"redis://127.0.0.1:{redis.port}/{db}"  # teams of the same names per mode
                with gateways(redis_url, pool_yaml(worker_url, fairness), Path(tmp)) as gws:
                    urls, admin = [u for u, _ in gws], gws[0][1]
                    print(f"\n[{fairness}]")
                    print(f"  weights 1:2:4   {weights_scenario(urls, admin, worker, scale)}")
                    print(f"  urgent          {urgent_scenario(urls, admin, worker, scale)}")
                    print(f"  adversary       {adversary_scenario(urls, admin, worker, 4.0 * scale)}")
                with gateways(redis_url, pool_yaml(worker_url, fairness, slots=4), Path(tmp)) as gws:
                    urls, admin = [u for u, _ in gws], gws[0][1]
                    print(f"  one team        {utilisation_scenario(urls, admin, worker, 4, 8.0 * scale)}")
                p50, p99 = asyncio.run(dispatch_latency(redis_url, fairness, 1000 * scale))
                print(f"  dispatch        p50 {p50:.3f} ms  p99 {p99:.3f} ms (freed slot to waiter)")
        p50, p99 = asyncio.run(redis_ping(redis.url, 2000))
        print(f"\nRedis PING on this machine: p50 {p50:.3f} ms  p99 {p99:.3f} ms")


if __name__ == "__main__":
    main()
