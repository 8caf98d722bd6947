"""Sluicegate in front of a real vLLM (CPU build, workers/vllm) versus vLLM direct, plus the Reframr
worker's requests/s with its test engine.

Waits while another vLLM runs (never touches it), starts its own with workers/vllm/serve.sh on a
free port, the Reframr worker (`--engine test`), a throwaway Redis and the gateway (model `tiny` ->
vLLM, `r` -> Reframr); nothing is pinned, since vLLM uses both cores. Direct and gateway phases
alternate (order flipped every round) so drift hits both sides. Prints a table with PASS/MISS; every
child, and the vLLM it started, is stopped on exit, on Ctrl-C, on SIGTERM and by a watchdog.

    .venv/bin/python bench/vllm_bench.py            # about 2 min plus vLLM start (about 1 min)
    .venv/bin/python bench/vllm_bench.py --quick    # about 40 s plus vLLM start
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop
from harness import cli, vllm
from harness.cpu import Monitor, cpu_seconds_of, machine_facts, split_cpus
from harness.load import Load, PhaseResult, Target, chat_body, open_session, percentile
from harness.procs import Children, free_port, gateway_stack, start_server
from harness.report import Table, compose, disturbance, phase_line

REFRAMR_MODEL = "r"
TARGET_THROUGHPUT_RATIO = 0.95
TARGET_ADDED_TTFT_MS = 1.5


@dataclass
class Plan:
    warmup_s: float  # per path (direct, gateway) and worker
    rounds: int  # direct/gateway rounds of vLLM streams
    side_s: float  # each vLLM slice
    concurrency: int
    tokens: int  # max_tokens of each stream, with ignore_eos
    reframr_rounds: int
    reframr_side_s: float
    reframr_concurrency: tuple[int, ...]
    reframr_answer_tokens: int

    @classmethod
    def make(cls, quick: bool) -> Plan:
        return cls(
            warmup_s=2.0 if quick else 3.0,
            rounds=2 if quick else 3,
            side_s=4.0 if quick else 10.0,
            concurrency=8,
            tokens=64,
            reframr_rounds=1 if quick else 2,
            reframr_side_s=1.5 if quick else 2.5,
            reframr_concurrency=(1, 8),  # the worker queues 8 (+1 running): no 429s expected
            reframr_answer_tokens=16,
        )

    def length_s(self) -> float:
        reframr = self.reframr_rounds * 2 * self.reframr_side_s * len(self.reframr_concurrency)
        return 4 * self.warmup_s + self.rounds * 2 * (self.side_s + 5) + reframr


async def measure(
    load: Load, base: dict[str, str], api_key: str, plan: Plan, children: Children
) -> dict[str, Any]:
    gateway = Target(base["gateway"], api_key)
    direct = Target(base[vllm.MODEL_NAME])
    reframr = Target(base[REFRAMR_MODEL])
    stream = chat_body(
        vllm.MODEL_NAME, True, plan.tokens, ignore_eos=True, stream_options={"include_usage": True}
    )
    whole = chat_body(REFRAMR_MODEL, False)
    results: dict[str, Any] = {"monitor": load.monitor}
    children.step(f"warm-up, {plan.warmup_s:g} s per path")
    for target, body, is_stream in (
        (direct, stream, True),
        (gateway, stream, True),
        (reframr, whole, False),
        (gateway, whole, False),
    ):
        await load.phase(
            target,
            body,
            name="warmup",
            concurrency=plan.concurrency,
            duration_s=plan.warmup_s,
            stream=is_stream,
            monitor=False,
        )
    children.step(
        f"vLLM {plan.tokens}-token streams, c={plan.concurrency}, {plan.rounds} x 2 x {plan.side_s:g} s"
    )
    results["vllm"] = await load.interleaved(
        direct,
        gateway,
        stream,
        rounds=plan.rounds,
        side_s=plan.side_s,
        name="vllm",
        concurrency=plan.concurrency,
        stream=True,
        count_tokens=True,
    )
    await settle(load.watch["vllm"])
    for c in plan.reframr_concurrency:
        children.step(f"Reframr non-stream, c={c}, {plan.reframr_rounds} x 2 x {plan.reframr_side_s:g} s")
        results[f"reframr c={c}"] = await load.interleaved(
            reframr,
            gateway,
            whole,
            rounds=plan.reframr_rounds,
            side_s=plan.reframr_side_s,
            name=f"reframr c={c}",
            concurrency=c,
            stream=False,
        )
    return results


async def settle(pids: list[int], max_wait_s: float = 10.0) -> None:
    """Waits (bounded) until vLLM is idle: its worker keeps spinning for a while after the last step."""
    for _ in range(int(max_wait_s / 0.5)):
        before = cpu_seconds_of(pids)
        await asyncio.sleep(0.5)
        if cpu_seconds_of(pids) - before < 0.05:
            return


def _ms(values: list[float], q: float) -> float:
    return 1000 * percentile(values, q)


def _cores(ph: PhaseResult, name: str) -> float:
    return ph.cpu_of.get(name, 0.0) / ph.wall_s if ph.wall_s else float("nan")


def report(results: dict[str, Any], plan: Plan, facts: list[str]) -> tuple[str, dict[str, Any]]:
    table = Table()
    d, g = results["vllm"]
    label = f"vLLM {plan.tokens}-token streams, c={plan.concurrency}"
    tok = {side: ph.tokens / ph.wall_s if ph.wall_s else float("nan") for side, ph in (("d", d), ("g", g))}
    table.row(f"{label}, direct", f"{d.rps:.2f} streams/s", f"{tok['d']:,.0f} tokens/s")
    table.row(f"{label}, via gateway", f"{g.rps:.2f} streams/s", f"{tok['g']:,.0f} tokens/s")
    ratio = tok["g"] / tok["d"] if tok["d"] else float("nan")
    table.check(
        "throughput ratio, gateway / direct (tokens/s)",
        ratio,
        f"{ratio:.3f}",
        ">=",
        TARGET_THROUGHPUT_RATIO,
        f"{TARGET_THROUGHPUT_RATIO}",
    )
    summary: dict[str, Any] = {
        "direct_streams_per_s": d.rps,
        "gateway_streams_per_s": g.rps,
        "direct_tokens_per_s": tok["d"],
        "gateway_tokens_per_s": tok["g"],
        "throughput_ratio": ratio,
    }
    for q in (50, 99):
        table.row(
            f"time to first token p{q}, direct / gateway",
            f"{_ms(d.ttft_s, q):.1f} / {_ms(g.ttft_s, q):.1f} ms",
        )
        added = _ms(g.ttft_s, q) - _ms(d.ttft_s, q)
        metric = f"added time to first token p{q}"
        if q == 50:
            table.check(
                metric, added, f"{added:.3f} ms", "<=", TARGET_ADDED_TTFT_MS, f"{TARGET_ADDED_TTFT_MS} ms"
            )
        else:
            table.row(metric, f"{added:.3f} ms")
        summary.update(
            {
                f"ttft_p{q}_direct_ms": _ms(d.ttft_s, q),
                f"ttft_p{q}_gateway_ms": _ms(g.ttft_s, q),
                f"added_ttft_p{q}_ms": added,
            }
        )
    cpu_s = g.cpu_s or 0.0
    per_stream = 1000 * cpu_s / g.requests if g.requests else float("nan")
    per_token = 1e6 * cpu_s / g.tokens if g.tokens else float("nan")
    table.row(
        "gateway CPU per stream (per token)",
        f"{per_stream:.2f} ms",
        f"({per_token:.1f} us/token)",
        f"gateway {cpu_s / g.wall_s:.2f} cores",
    )
    vllm_per = [
        1000 * ph.cpu_of.get("vllm", 0.0) / ph.requests if ph.requests else float("nan") for ph in (d, g)
    ]
    table.row(
        "vLLM CPU per stream, direct / via gateway",
        f"{vllm_per[0]:.1f} / {vllm_per[1]:.1f} ms",
        "",
        f"vLLM {_cores(d, 'vllm'):.2f} / {_cores(g, 'vllm'):.2f} cores",
    )
    summary.update(gateway_cpu_ms_per_stream=per_stream, gateway_cpu_us_per_token=per_token)
    for c in plan.reframr_concurrency:
        rd, rg = results[f"reframr c={c}"]
        table.row(
            f"Reframr test engine, non-stream, c={c}: req/s, direct / gateway",
            f"{rd.rps:,.0f} / {rg.rps:,.0f}",
            f"p50 {_ms(rd.latencies_s, 50):.2f} / {_ms(rg.latencies_s, 50):.2f} ms",
            f"429s: {rd.rejected} / {rg.rejected}",
        )
        summary.update(
            {
                f"reframr_c{c}_direct_rps": rd.rps,
                f"reframr_c{c}_gateway_rps": rg.rps,
                f"reframr_c{c}_direct_p50_ms": _ms(rd.latencies_s, 50),
                f"reframr_c{c}_gateway_p50_ms": _ms(rg.latencies_s, 50),
                f"reframr_c{c}_429s": rd.rejected + rg.rejected,
            }
        )

    details = [
        "details (ms; vLLM: time to first content delta, then whole stream; CPU in cores over the phase):"
    ]
    for ph in (d, g):
        details.append(
            f"  {ph.name:<18} n={ph.requests:>5} streams  {ph.rps:6.2f}/s  "
            f"{ph.tokens / ph.wall_s:7,.0f} tokens/s  TTFT p50={_ms(ph.ttft_s, 50):6.1f} "
            f"p90={_ms(ph.ttft_s, 90):6.1f} p99={_ms(ph.ttft_s, 99):6.1f}  "
            f"stream p50={_ms(ph.latencies_s, 50):6.1f}  errors={ph.errors}  CPU: "
            + ", ".join(f"{name} {_cores(ph, name):.2f}" for name in ph.cpu_of)
        )
    notes = []
    if d.tokens != plan.tokens * d.requests or g.tokens != plan.tokens * g.requests:
        notes.append(f"usage said {d.tokens} / {g.tokens} tokens, not {plan.tokens} per stream")
    phases: list[PhaseResult] = [d, g]
    for c in plan.reframr_concurrency:
        for ph in results[f"reframr c={c}"]:
            extra = f"  429s={ph.rejected}  idle vLLM {_cores(ph, 'vllm'):.2f} cores"
            details.append(phase_line(ph, ph.latencies_s, 18, extra))
            phases.append(ph)
    lines, more_notes = disturbance(phases, results["monitor"])
    summary["errors"] = sum(ph.errors for ph in phases)
    return "\n".join(compose(facts, table, details + lines, notes + more_notes)), summary


def run(plan: Plan, args: argparse.Namespace, children: Children) -> tuple[str, dict[str, Any]]:
    usable, _, _ = split_cpus(no_pin=True)
    pinning = "none: vLLM uses both cores; the gateway, Redis, Reframr and the load generator share them"
    vllm_fact = f"vllm:    {vllm.version()} (CPU build), model {vllm.MODEL_NAME} (random weights, 2 layers)"
    facts = machine_facts(usable, pinning, (vllm_fact,))
    with (
        vllm.vllm_server(children, free_port(), children.step) as server,
        tempfile.TemporaryDirectory(prefix="sluicegate-bench-") as tmp,
    ):
        children.arm(int(plan.length_s() + 90 + args.wait_quiet))  # the watchdog, now that vLLM is up
        children.temp_dirs.append(tmp)
        port = free_port()
        argv = [sys.executable, "-m", "workers.reframr", "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--model-name", REFRAMR_MODEL, "--engine", "test"]
        argv += ["--answer-tokens", str(plan.reframr_answer_tokens)]
        reframr_base = f"http://127.0.0.1:{port}"
        reframr = start_server(children, "reframr", argv, reframr_base + "/health", Path(tmp) / "reframr.log")
        base = {vllm.MODEL_NAME: server.base, REFRAMR_MODEL: reframr_base}
        with gateway_stack(children, base, None, None) as stack:
            print("\n".join(facts), file=sys.stderr, flush=True)
            watch = {"gateway": [stack.gateway_pid], "vllm": server.pids(), "load generator": [os.getpid()]}
            pids = [*stack.redis_pids, reframr.pid, *(pid for group in watch.values() for pid in group)]

            async def main() -> dict[str, Any]:
                async with open_session() as session:
                    load = Load(session, Monitor(pids, args.wait_quiet), stack.gateway_pid, watch)
                    return await measure(load, {**base, "gateway": stack.base}, stack.api_key, plan, children)

            results = uvloop.run(main())
    return report(results, plan, facts)


def main(argv: list[str] | None = None) -> int:
    args = cli.parser(__doc__, "shorter phases (about 35 s plus vLLM start)").parse_args(argv)
    plan = Plan.make(args.quick)
    children = Children()
    # Until vLLM is up: up to 10 min waiting for another vLLM, up to 5 min for serve.sh.
    limit_s = 600 + 300 + plan.length_s() + 90 + args.wait_quiet
    return cli.run_to_report(children, limit_s, lambda: run(plan, args, children), plan, args.json)


if __name__ == "__main__":
    sys.exit(main())
