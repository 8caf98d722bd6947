"""Sluicegate gateway benchmark: throughput, CPU per request, added latency, added TTFT, CPU per chunk.

Starts a throwaway Redis, the raw-asyncio mock worker (bench/mock_worker.py) and the gateway
(`python -m gateway serve`) as child processes; pins the gateway to one CPU and everything else
(Redis, the mock workers, this load generator) to the other CPU(s); warms up; runs bounded load
phases; prints a table with PASS/MISS against the targets. Every child is stopped on exit, on
Ctrl-C, on SIGTERM, and by a hard watchdog if anything hangs.

    .venv/bin/python bench/gateway_bench.py            # full run, about 60 s
    .venv/bin/python bench/gateway_bench.py --quick    # smoke run, about 25 s
    .venv/bin/python bench/gateway_bench.py --profile /tmp/prof   # + py-spy phases afterwards
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop
from harness import cli
from harness.cpu import Monitor, cpu_seconds, machine_facts, memory_kib, pin, split_cpus
from harness.load import Load, PhaseResult, Target, chat_body, open_session, percentile
from harness.procs import Children, gateway_stack, start_announcing
from harness.profile import find_py_spy, profile_phases, report_profiles
from harness.report import Table, compose, disturbance, phase_line

MOCK_WORKER = Path(__file__).resolve().parent / "mock_worker.py"
MODEL = "bench-model"
PACED_MODEL = "bench-model-paced"
TTFT_MODEL = "bench-model-ttft"
SATURATION_CONCURRENCY = 48
STREAM_CONCURRENCY = 16
TOKENS = 64  # content deltas per streamed answer
PACED_DELAY_MS = 2.0  # the paced worker's pause before each content delta
TTFT_DELAY_MS = 1.0  # the TTFT worker's pause before (and after) the first content delta

# Targets (printed with PASS/MISS).
TARGET_CPU_MS_PER_REQUEST = 0.5
TARGET_REQS_PER_CORE = 2000.0
TARGET_ADDED_P50_C1_MS = 0.8
TARGET_ADDED_TTFT_MS = 1.5
TARGET_CPU_US_PER_CHUNK = 50.0


@dataclass
class Plan:
    warmup_s: float
    saturation_s: float
    saturation_concurrency: int
    latency_rounds: int
    latency_side_s: float
    c16_side_s: float
    ttft_side_s: float
    stream_s: float
    stream_concurrency: int
    paced_s: float
    paced_delay_ms: float
    ttft_delay_ms: float
    tokens: int
    profile_s: float

    @classmethod
    def make(cls, quick: bool) -> Plan:
        return cls(
            warmup_s=1.0 if quick else 2.0,
            saturation_s=3.0 if quick else 8.0,
            saturation_concurrency=SATURATION_CONCURRENCY,
            latency_rounds=2 if quick else 4,
            latency_side_s=1.0 if quick else 1.5,
            c16_side_s=0.75 if quick else 1.0,
            ttft_side_s=1.0 if quick else 1.5,
            stream_s=3.0 if quick else 8.0,
            stream_concurrency=STREAM_CONCURRENCY,
            paced_s=2.0 if quick else 5.0,
            paced_delay_ms=PACED_DELAY_MS,
            ttft_delay_ms=TTFT_DELAY_MS,
            tokens=TOKENS,
            profile_s=4.0 if quick else 6.0,
        )

    def length_s(self, profile: bool) -> float:
        sides = self.latency_side_s + self.c16_side_s + self.ttft_side_s
        return (
            self.warmup_s
            + self.saturation_s
            + self.latency_rounds * 2 * sides
            + self.stream_s
            + self.paced_s
            + (3 * (self.profile_s + 20) if profile else 0)
        )


async def measure(
    load: Load,
    base: dict[str, str],
    api_key: str,
    limited_key: str,
    redis_url: str,
    others: dict[str, int],
    plan: Plan,
    args: argparse.Namespace,
    step: Callable[[str], None],
) -> dict[str, Any]:
    """The phases, in order. `base` maps each model to its worker's URL, and "gateway" to the
    gateway's; `others` names the pids of the other side (load generator, workers, Redis)."""
    gateway = Target(base["gateway"], api_key)
    direct = Target(base[MODEL])
    direct_ttft = Target(base[TTFT_MODEL])
    whole = chat_body(MODEL, stream=False)
    streamed = chat_body(MODEL, stream=True)
    ttft_body = chat_body(TTFT_MODEL, stream=True)
    paced = chat_body(PACED_MODEL, stream=True)
    expect = plan.tokens + 2  # role chunk + content deltas + [DONE]; the usage chunk is stripped
    gw = load.gateway_pid
    results: dict[str, Any] = {"monitor": load.monitor}

    step("warm-up")
    for target, body, stream in (
        (direct, whole, False),
        (gateway, whole, False),
        (direct, streamed, True),
        (gateway, streamed, True),
        (direct_ttft, ttft_body, True),
        (gateway, ttft_body, True),
    ):
        duration_s = plan.warmup_s / 6
        await load.phase(
            target, body, name="warmup", concurrency=8, duration_s=duration_s, stream=stream, monitor=False
        )
    results["rss_after_warmup_kib"] = memory_kib(gw)

    step(f"saturation, non-stream, c={plan.saturation_concurrency}, {plan.saturation_s:g} s")
    others_cpu0 = {name: cpu_seconds(pid) for name, pid in others.items()}
    results["saturation"] = await load.phase(
        gateway,
        whole,
        name="saturation",
        concurrency=plan.saturation_concurrency,
        duration_s=plan.saturation_s,
        stream=False,
        gateway_cpu=True,
    )
    results["saturation_other_cpu_s"] = {
        name: cpu_seconds(pid) - others_cpu0[name] for name, pid in others.items()
    }

    step(f"saturation with every limit on key and team, c={plan.saturation_concurrency}")
    calls_before = redis_calls(redis_url)
    results["limited"] = await load.phase(
        Target(base["gateway"], limited_key),
        whole,
        name="all limits",
        concurrency=plan.saturation_concurrency,
        duration_s=plan.saturation_s,
        stream=False,
        gateway_cpu=True,
    )
    results["limited_redis_commands"] = redis_calls(redis_url) - calls_before

    rounds = plan.latency_rounds
    for key, target, body, concurrency, side_s, what in (
        ("c1", direct, whole, 1, plan.latency_side_s, "added latency"),
        ("c16", direct, whole, 16, plan.c16_side_s, "added latency"),
        ("ttft", direct_ttft, ttft_body, 1, plan.ttft_side_s, "time to first token"),
    ):
        step(f"{what}, c={concurrency}, {rounds} x 2 x {side_s:g} s")
        name = f"ttft c={concurrency}" if key == "ttft" else f"latency c={concurrency}"
        results[key] = await load.interleaved(
            target, gateway, body, rounds=rounds, side_s=side_s, name=name,
            concurrency=concurrency, stream=key == "ttft",
        )  # fmt: skip
    paced_what = f"paced streaming CPU ({plan.paced_delay_ms:g} ms/token)"
    for key, body, name, duration_s, what in (
        ("stream", streamed, "stream unpaced", plan.stream_s, "streaming CPU"),
        ("paced", paced, "stream paced", plan.paced_s, paced_what),
    ):
        step(f"{what}, c={plan.stream_concurrency}, {duration_s:g} s")
        results[key] = await load.phase(
            gateway, body, name=name, concurrency=plan.stream_concurrency, duration_s=duration_s,
            stream=True, expect_events=expect, gateway_cpu=True,
        )  # fmt: skip
    results["rss_after_run_kib"] = memory_kib(gw)

    if args.profile:
        results["profiles"] = await profile_phases(
            load,
            gateway,
            [
                ("nonstream", whole, plan.saturation_concurrency, False),
                ("stream", streamed, plan.stream_concurrency, True),
                ("paced", paced, plan.stream_concurrency, True),
            ],
            plan.profile_s,
            Path(args.profile),
            args.py_spy,
            step,
        )
    return results


# The commands the gateway sends itself on the request path. commandstats also counts the
# commands a Lua script runs inside Redis (GET, ZADD, ...), which are no round trips.
_GATEWAY_COMMANDS = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_hgetall", "cmdstat_hmget")


def redis_calls(url: str) -> int:
    """Commands the gateway has sent Redis (INFO commandstats)."""
    import redis

    with redis.Redis.from_url(url) as client:
        stats = client.info("commandstats")
    return sum(int(stats[name]["calls"]) for name in _GATEWAY_COMMANDS if name in stats)


def report(results: dict[str, Any], plan: Plan, facts: list[str]) -> tuple[str, dict[str, Any]]:
    table = Table()
    summary: dict[str, Any] = {}
    sat: PhaseResult = results["saturation"]
    assert sat.cpu_s is not None
    cpu_ms = 1000 * sat.cpu_s / sat.requests if sat.requests else float("nan")
    per_core = 1000 / cpu_ms if cpu_ms else float("nan")
    busy = sat.cpu_s / sat.wall_s if sat.wall_s else 0.0
    table.row(
        f"throughput, non-stream, c={sat.concurrency}",
        f"{sat.rps:,.0f} req/s",
        "",
        f"gateway core {100 * busy:.0f}% busy",
    )
    table.check(
        "gateway CPU per request",
        cpu_ms,
        f"{cpu_ms:.3f} ms",
        "<=",
        TARGET_CPU_MS_PER_REQUEST,
        f"{TARGET_CPU_MS_PER_REQUEST} ms",
    )
    table.check(
        "requests/s per gateway core",
        per_core,
        f"{per_core:,.0f}",
        ">=",
        TARGET_REQS_PER_CORE,
        f"{TARGET_REQS_PER_CORE:,.0f}",
    )
    summary.update(rps=sat.rps, cpu_ms_per_request=cpu_ms, requests_per_core=per_core, gateway_busy=busy)

    limited: PhaseResult = results["limited"]
    assert limited.cpu_s is not None
    limited_ms = 1000 * limited.cpu_s / limited.requests if limited.requests else float("nan")
    # Rounded: a key or team lookup per second (cache refresh) is not a per-request cost.
    commands = (
        round(results["limited_redis_commands"] / limited.requests, 2) if limited.requests else float("nan")
    )
    table.check(
        "gateway CPU per request, every limit on key and team",
        limited_ms,
        f"{limited_ms:.3f} ms",
        "<=",
        TARGET_CPU_MS_PER_REQUEST,
        f"{TARGET_CPU_MS_PER_REQUEST} ms",
    )
    # Commands bound round trips from above: pipelined settlements share round trips.
    table.check("Redis commands per request, every limit", commands, f"{commands:.2f}", "<=", 2, "2")
    summary.update(limited_cpu_ms_per_request=limited_ms, limited_redis_commands_per_request=commands)

    for key, label in (("c1", "c=1"), ("c16", "c=16")):
        d, g = results[key]
        for q in (50, 99):
            added = 1000 * (percentile(g.latencies_s, q) - percentile(d.latencies_s, q))
            metric = f"added latency p{q}, non-stream, {label}"
            if (key, q) == ("c1", 50):
                table.check(
                    metric,
                    added,
                    f"{added:.3f} ms",
                    "<=",
                    TARGET_ADDED_P50_C1_MS,
                    f"{TARGET_ADDED_P50_C1_MS} ms",
                )
            else:
                table.row(metric, f"{added:.3f} ms")
            summary[f"added_p{q}_{key}_ms"] = added
    d, g = results["ttft"]
    for q in (50, 99):
        added = 1000 * (percentile(g.ttft_s, q) - percentile(d.ttft_s, q))
        metric = f"added time to first token p{q}, {plan.tokens}-token stream, c=1"
        table.check(
            metric, added, f"{added:.3f} ms", "<=", TARGET_ADDED_TTFT_MS, f"{TARGET_ADDED_TTFT_MS} ms"
        )
        summary[f"added_ttft_p{q}_ms"] = added
    for key, label in (("stream", "unpaced"), ("paced", f"paced {plan.paced_delay_ms:g} ms/token")):
        ph: PhaseResult = results[key]
        assert ph.cpu_s is not None
        per_chunk = 1e6 * ph.cpu_s / ph.events if ph.events else float("nan")
        metric = f"gateway CPU per streamed chunk, {label}, c={ph.concurrency}"
        table.check(
            metric,
            per_chunk,
            f"{per_chunk:.1f} us",
            "<=",
            TARGET_CPU_US_PER_CHUNK,
            f"{TARGET_CPU_US_PER_CHUNK:g} us",
        )
        table.row(
            f"  ({label}: streams/s, chunks/s, gateway core busy)",
            f"{ph.rps:,.0f} /s",
            f"{ph.events / ph.wall_s:,.0f} chunks/s",
            f"{100 * ph.cpu_s / ph.wall_s:.0f}% busy",
        )
        summary[f"cpu_us_per_chunk_{key}"] = per_chunk
    rss, warm = results["rss_after_run_kib"], results["rss_after_warmup_kib"]
    table.row(
        "gateway RSS after run (after warm-up; peak)",
        f"{rss['VmRSS'] / 1024:.1f} MiB",
        f"({warm['VmRSS'] / 1024:.1f}; {rss['VmHWM'] / 1024:.1f})",
    )
    summary["rss_mib"] = rss["VmRSS"] / 1024

    details = ["details (latency in ms; added = gateway percentile - direct percentile):"]
    for key in ("c1", "c16", "ttft"):
        for ph in results[key]:
            details.append(phase_line(ph, ph.ttft_s if key == "ttft" else ph.latencies_s))
    other = results["saturation_other_cpu_s"]
    details.append(
        f"  saturation: {sat.requests} requests in {sat.wall_s:.2f} s, gateway CPU {sat.cpu_s:.2f} s; "
        "CPU of the other side: " + ", ".join(f"{name} {secs:.2f} s" for name, secs in other.items())
    )
    notes = []
    if busy < 0.9:
        notes.append(
            f"the gateway core was only {100 * busy:.0f}% busy at saturation: the load-generator side "
            "(or other processes, see above) limited throughput, so req/s understates the gateway; "
            "CPU per request still holds"
        )
    phases = [sat, *results["c1"], *results["c16"], *results["ttft"], results["stream"], results["paced"]]
    lines, more_notes = disturbance(phases, results["monitor"])
    summary["errors"] = sum(ph.errors for ph in phases)
    out = compose(facts, table, details + lines, notes + more_notes)
    return "\n".join(out + report_profiles(results.get("profiles", {}))), summary


def run(plan: Plan, args: argparse.Namespace, children: Children) -> tuple[str, dict[str, Any]]:
    usable, gw_cpus, rest_cpus = split_cpus(args.no_pin)
    pinning = (
        f"gateway on CPU {sorted(gw_cpus)}, Redis + mock worker + load generator on CPU {sorted(rest_cpus)}"
        if gw_cpus and rest_cpus
        else "not pinned (fewer than 2 usable CPUs)"
    )
    facts = machine_facts(usable, pinning)
    pin(os.getpid(), rest_cpus)  # Redis and the workers inherit this
    workers = {}
    for model, token_ms, first_ms in (
        (MODEL, 0.0, 0.0),
        (TTFT_MODEL, 0.0, plan.ttft_delay_ms),
        (PACED_MODEL, plan.paced_delay_ms, 0.0),
    ):
        argv = [sys.executable, str(MOCK_WORKER), "--port", "0", "--tokens", str(plan.tokens)]
        argv += ["--token-delay-ms", str(token_ms), "--first-token-delay-ms", str(first_ms)]
        workers[model] = start_announcing(children, model, argv, rest_cpus)
    base = {model: f"http://127.0.0.1:{port}" for model, (port, _) in workers.items()}
    with gateway_stack(children, base, gw_cpus, rest_cpus) as stack:
        others = {"load generator": os.getpid()}
        others.update({f"worker {model}": proc.pid for model, (_, proc) in workers.items()})
        pids = stack.redis_pids
        others.update({"redis" if len(pids) == 1 else f"redis {pid}": pid for pid in pids})
        print("\n".join(facts), file=sys.stderr, flush=True)

        async def main() -> dict[str, Any]:
            async with open_session() as session:
                monitor = Monitor([stack.gateway_pid, *others.values()], args.wait_quiet)
                load = Load(session, monitor, stack.gateway_pid)
                urls = {**base, "gateway": stack.base}
                return await measure(
                    load,
                    urls,
                    stack.api_key,
                    stack.limited_key,
                    stack.redis_url,
                    others,
                    plan,
                    args,
                    children.step,
                )

        results = uvloop.run(main())
    return report(results, plan, facts)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = cli.parser(__doc__, "shorter phases: a ~25 s smoke run")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    parser.add_argument("--profile", metavar="DIR", help="afterwards, py-spy the gateway under load into DIR")
    args = parser.parse_args(argv)
    if args.profile:
        args.py_spy = find_py_spy()
        if args.py_spy is None:
            parser.error("--profile needs py-spy: .venv/bin/pip install py-spy")
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = Plan.make(args.quick)
    children = Children()
    limit_s = 60 + plan.length_s(bool(args.profile)) + args.wait_quiet
    return cli.run_to_report(children, limit_s, lambda: run(plan, args, children), plan, args.json)


if __name__ == "__main__":
    sys.exit(main())
