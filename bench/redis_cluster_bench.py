"""What Redis costs per gateway request, on one Redis and on a Redis Cluster, and how many
admissions one Redis primary sustains: the numbers behind docs/scaling.md.

Part 1, for each store (one redis-server; a 3 primaries + 3 replicas cluster on loopback):
the mock worker (bench/mock_worker.py) and `python -m gateway serve` as child processes, a key
whose team has every limit on (rpm, tpm, concurrency, daily and monthly budgets, on key and team),
warm-up, then a counted phase of non-stream chat requests. Reported per request: the Redis
commands the gateway sent (INFO commandstats summed over every primary, split into those the
gateway sends and those its Lua scripts run), the gateway's CPU (/proc), and Redis's CPU (INFO cpu,
every primary).

Part 2, one redis-server alone: admit.lua with every limit on, called through the gateway's own
RateLimiter from this process at a fixed concurrency, then settle.lua for the same admissions.
Reported: Redis CPU per admission and per settlement (INFO cpu: script and network), the script's
own time (INFO commandstats usec_per_call of evalsha), and so the admissions/s one primary core
sustains; the rate this one Python client reached is a lower bound, printed too.

    .venv/bin/python bench/redis_cluster_bench.py             # about 1 min
    .venv/bin/python bench/redis_cluster_bench.py --quick     # smoke run, about 25 s

Needs redis-server and redis-cli on PATH; every port is a free loopback one; every child is
stopped on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import redis
import redis.asyncio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.redis_stats import split  # noqa: E402  # bench/ is this script's directory

from gateway.dev.embedded_redis import EmbeddedRedis  # noqa: E402
from gateway.limits.admission import Limit, LimitKind, Reservation  # noqa: E402
from gateway.limits.limit_store import LimitStore  # noqa: E402
from gateway.limits.limiter import RateLimiter  # noqa: E402
from gateway.metering.meter import Meter  # noqa: E402
from gateway.metering.record import UsageRecord  # noqa: E402
from gateway.metering.usage_store import UsageStore  # noqa: E402
from gateway.observability.metrics import Metrics  # noqa: E402
from gateway.redis import keys as redis_keys  # noqa: E402
from gateway.redis.breaker import RedisBreaker  # noqa: E402
from tests.redis_cluster import RedisClusterNodes  # noqa: E402

MODEL = "bench-model"
NEVER = 1_000_000_000  # a limit high enough never to refuse: every one is checked and charged
LIMITS = {"rpm": NEVER, "tpm": NEVER, "max_concurrency": 100_000}
BUDGETS = {"daily_tokens": NEVER, "monthly_tokens": NEVER}


@dataclass
class Sample:
    commands: dict[str, int]
    redis_cpu_s: float
    gateway_cpu_s: float


def _process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _redis_sample(ports: list[int]) -> tuple[dict[str, int], float, dict[str, float]]:
    """(calls per command, CPU seconds, usec per command) summed over `ports`."""
    calls: dict[str, int] = {}
    usec: dict[str, float] = {}
    cpu = 0.0
    for port in ports:
        with redis.Redis(port=port) as client:
            for name, entry in client.info("commandstats").items():
                command = name.removeprefix("cmdstat_")
                # This bench's own, the cluster client's topology reads, replicas' acknowledgements.
                if command in ("info", "cluster", "replconf"):
                    continue
                calls[command] = calls.get(command, 0) + int(entry["calls"])
                usec[command] = usec.get(command, 0.0) + float(entry["usec"])
            info = client.info("cpu")
            cpu += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return calls, cpu, usec


def _diff(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


@contextlib.contextmanager
def _child(argv: list[str], env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _call(method: str, url: str, token: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method=method)  # noqa: S310
    request.add_header("authorization", f"Bearer {token}")
    request.add_header("content-type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        return json.loads(response.read())


def _wait_ready(url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310
            if response.status == 200:
                return
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{url} never became ready")
        time.sleep(0.05)


async def _drive(url: str, key: str, requests: int, concurrency: int) -> int:
    body = b'{"model":"' + MODEL.encode() + b'","messages":[{"role":"user","content":"hi"}],"max_tokens":16}'
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    left = requests
    ok = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal left, ok
        while left > 0:
            left -= 1
            async with session.post(f"{url}/v1/chat/completions", data=body, headers=headers) as resp:
                await resp.read()
                ok += resp.status == 200

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return ok


def gateway_phase(store: str, redis_url: str, primaries: list[int], requests: int, concurrency: int) -> str:
    mock = [sys.executable, str(ROOT / "bench" / "mock_worker.py"), "--port", "0"]
    with tempfile.TemporaryDirectory(prefix="sluicegate-cluster-bench-") as tmp, _child(mock) as worker:
        assert worker.stdout is not None
        worker_port = int(worker.stdout.readline().split()[1])
        config = Path(tmp) / "models.yaml"
        config.write_text(
            f"models:\n  - name: {MODEL}\n    endpoints:\n      - url: http://127.0.0.1:{worker_port}\n"
        )
        token = secrets.token_urlsafe(24)
        port = _free_port()
        env = {
            **os.environ,
            "SLUICEGATE_REDIS_URL": redis_url,
            "SLUICEGATE_CONFIG": str(config),
            "SLUICEGATE_ADMIN_TOKEN": token,
            "SLUICEGATE_HOST": "127.0.0.1",
            "SLUICEGATE_PORT": str(port),
            "SLUICEGATE_LOG_LEVEL": "warning",
            "SLUICEGATE_SHUTDOWN_DELAY": "0",
        }
        base = f"http://127.0.0.1:{port}"
        with _child([sys.executable, "-m", "gateway", "serve"], env=env) as gateway:
            _wait_ready(base + "/readyz", gateway)
            team = "bench-" + secrets.token_hex(3)
            _call("POST", base + "/admin/v1/teams", token, {"name": team, **LIMITS, **BUDGETS})
            key = _call("POST", base + "/admin/v1/keys", token, {"team": team, **LIMITS})["key"]
            asyncio.run(_drive(base, key, max(200, requests // 10), concurrency))  # warm-up
            calls0, cpu0, _ = _redis_sample(primaries)
            gw0, t0 = _process_cpu_s(gateway.pid), time.monotonic()
            ok = asyncio.run(_drive(base, key, requests, concurrency))
            elapsed = time.monotonic() - t0
            gw_cpu = _process_cpu_s(gateway.pid) - gw0
            # The write-behind meter settles just after the answers: wait until every settlement is in.
            deadline = time.monotonic() + 30
            while True:
                calls1, cpu1, _ = _redis_sample(primaries)
                if (
                    calls1.get("evalsha", 0) - calls0.get("evalsha", 0) >= 2 * ok
                    or time.monotonic() > deadline
                ):
                    break
                time.sleep(0.05)
    sent, in_lua = split(_diff(calls1, calls0), ok)
    return (
        f"{store:8s} {ok} requests at c={concurrency}, {ok / elapsed:.0f} req/s\n"
        f"  Redis commands per request, sent by the gateway: "
        f"{sum(sent.values()):.2f} ({', '.join(f'{k} {v:.2f}' for k, v in sent.items())})\n"
        f"  run inside Lua scripts: {sum(in_lua.values()):.1f}\n"
        f"  gateway CPU per request: {gw_cpu / ok * 1e3:.3f} ms;  Redis CPU per request "
        f"(all primaries): {(cpu1 - cpu0) / ok * 1e6:.0f} us\n"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _every_limit(team: str, key_id: str) -> list[Limit]:
    """What a key with every limit on, in a team with every limit on, admits against."""

    def on(scope: str) -> str:
        return redis_keys.rate_limit(team, scope)

    return [
        Limit(LimitKind.REQUESTS, on(f"key:{key_id}:rpm"), NEVER, "key rpm"),
        Limit(LimitKind.TOKENS, on(f"key:{key_id}:tpm"), NEVER, "key tpm"),
        Limit(LimitKind.CONCURRENCY, on(f"key:{key_id}:conc"), 100_000, "key conc"),
        Limit(LimitKind.REQUESTS, on("team:rpm"), NEVER, "team rpm"),
        Limit(LimitKind.TOKENS, on("team:tpm"), NEVER, "team tpm"),
        Limit(LimitKind.CONCURRENCY, on("team:conc"), 100_000, "team conc"),
        Limit(LimitKind.BUDGET, on("budget:d"), NEVER, "daily", period_s=86_400),
        Limit(LimitKind.BUDGET, on("budget:m"), NEVER, "monthly", period_s=30 * 86_400),
    ]


def admission_phase(admissions: int, concurrency: int) -> str:
    async def run(url: str, port: int) -> str:
        client = redis.asyncio.Redis.from_url(url)
        meter = Meter(UsageStore(client, timeout_s=5), Metrics())
        limiter = RateLimiter(LimitStore(client, RedisBreaker(1.0), timeout_s=5), Metrics(), meter)
        teams = [f"adm-{n}" for n in range(16)]
        reservation = Reservation(50, 200)
        done: list[tuple[str, str, Any]] = []
        counter = iter(range(admissions))

        async def admit_worker() -> None:
            for n in counter:
                team = teams[n % len(teams)]
                rid = f"r{n}"
                admission = await limiter.admit(team, _every_limit(team, "k1"), rid, reservation)
                assert admission.allowed
                done.append((team, rid, admission))

        async def settle_worker(items: list[tuple[str, str, Any]]) -> None:
            for team, rid, admission in items:
                await meter.record(
                    UsageRecord(
                        rid,
                        team,
                        "k1",
                        MODEL,
                        40,
                        120,
                        False,
                        False,
                        UsageRecord.today(),
                        tuple(admission.settlements(40, 120)),
                    )
                )

        try:
            await asyncio.gather(*(admit_worker() for _ in range(4)))  # warm-up: scripts loaded
            counter = iter(range(admissions, 2 * admissions))
            done.clear()
            calls0, cpu0, usec0 = _redis_sample([port])
            t0 = time.monotonic()
            await asyncio.gather(*(admit_worker() for _ in range(concurrency)))
            admit_s = time.monotonic() - t0
            calls1, cpu1, usec1 = _redis_sample([port])
            chunks = [done[i::concurrency] for i in range(concurrency)]
            t1 = time.monotonic()
            await asyncio.gather(*(settle_worker(chunk) for chunk in chunks))
            settle_s = time.monotonic() - t1
            calls2, cpu2, usec2 = _redis_sample([port])
        finally:
            await limiter.aclose()
            await client.aclose()
        n = len(done)
        admit_cpu = (cpu1 - cpu0) / n
        settle_cpu = (cpu2 - cpu1) / n
        script_admit = (usec1["evalsha"] - usec0["evalsha"]) / (calls1["evalsha"] - calls0["evalsha"])
        script_settle = (usec2["evalsha"] - usec1["evalsha"]) / (calls2["evalsha"] - calls1["evalsha"])
        return (
            f"admit.lua, 8 limits (rpm, tpm, concurrency on key and team; daily and monthly budgets), "
            f"{n} admissions at c={concurrency}:\n"
            f"  script time (commandstats usec_per_call): admit {script_admit:.1f} us, "
            f"settle {script_settle:.1f} us\n"
            f"  Redis CPU (INFO cpu, script + network): admit {admit_cpu * 1e6:.1f} us, "
            f"settle {settle_cpu * 1e6:.1f} us\n"
            f"  one primary core sustains about {1 / admit_cpu:.0f} admissions/s alone, "
            f"{1 / (admit_cpu + settle_cpu):.0f} admitted-and-settled requests/s\n"
            f"  (this one Python client reached {n / admit_s:.0f} admissions/s, "
            f"{n / settle_s:.0f} settlements/s)\n"
        )

    with EmbeddedRedis() as server:
        return asyncio.run(run(server.url, server.port))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer requests: a smoke run")
    args = parser.parse_args()
    requests, admissions = (800, 3000) if args.quick else (4000, 20000)
    print(f"machine: {os.cpu_count()} CPUs; redis-server {_redis_version()}", flush=True)
    with EmbeddedRedis() as single:
        print(gateway_phase("single", single.url, [single.port], requests, 16), flush=True)
    with RedisClusterNodes() as cluster:
        print(gateway_phase("cluster", cluster.url, cluster.primaries(), requests, 16), flush=True)
    print(admission_phase(admissions, 32), flush=True)
    return 0


def _redis_version() -> str:
    return subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()[2]


if __name__ == "__main__":
    raise SystemExit(main())
