"""Where a stream's time to first token goes in the gateway: 16 concurrent paced 64-token streams
(the gateway_bench.py phase whose TTFT row is furthest from its target), direct to the mock worker,
through the bare proxy and through the gateway, taken in turn, with the gateway run under
harness/ttft_marks.py, which timestamps each request's way to its first token: entry, admission
(the limits' Redis round trip), the worker call up to the answer's head, the first worker event
with text read, and its send to the client.

    .venv/bin/python bench/ttft_bench.py                 # about 40 s
    SLUICEGATE_BENCH_GATEWAY_SRC=/tmp/before .venv/bin/python bench/ttft_bench.py

Pinned as gateway_bench.py pins (the gateway and the bare proxy on CPU 0, the rest on CPU 1). The
timestamps cost the gateway a little CPU per request: read its added TTFT from gateway_bench.py,
and this breakdown as where that time goes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop
from harness import cli
from harness.cpu import Monitor, machine_facts, pin, split_cpus
from harness.load import Load, Target, chat_body, open_session
from harness.procs import Children, gateway_stack, start_announcing, start_bare_proxy

MOCK_WORKER = Path(__file__).resolve().parent / "mock_worker.py"
MARKS_RUNNER = Path(__file__).resolve().parent / "harness" / "ttft_marks.py"
MODEL = "bench-model-paced"
TOKENS = 64
CONCURRENCY = 16
STEPS = (
    ("entry -> admission", "in", "admit0"),
    ("admission (Redis round trip)", "admit0", "admit1"),
    ("  -> the script's write to Redis", "admit0", "redis_w"),
    ("  the write -> its reply arrives", "redis_w", "redis_r"),
    ("  the reply -> the call resumes", "redis_r", "redis_resumed"),
    ("  the call resumes -> admitted", "redis_resumed", "admit1"),
    ("admitted -> worker call", "admit1", "open0"),
    ("worker call, to the answer's head", "open0", "open1"),
    ("head -> first text read", "open1", "first_in"),
    ("first text read -> its send", "first_in", "out0"),
    ("the send", "out0", "out1"),
    ("entry -> first text sent", "in", "out1"),
)


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000 if values else float("nan")


def run(args: argparse.Namespace, children: Children) -> str:
    usable, gw_cpus, rest_cpus = split_cpus(False)
    facts = machine_facts(usable, "gateway and bare proxy on CPU 0, the rest on CPU 1")
    print("\n".join(facts), file=sys.stderr, flush=True)
    pin(os.getpid(), rest_cpus)
    argv = [sys.executable, str(MOCK_WORKER), "--port", "0", "--tokens", str(TOKENS)]
    argv += ["--token-delay-ms", str(args.token_delay_ms), "--prefill-ms", "0"]
    port, worker = start_announcing(children, "paced mock worker", argv, rest_cpus)
    url = f"http://127.0.0.1:{port}"
    bare_port, bare = start_bare_proxy(children, "bare proxy", url, gw_cpus)
    marks_path = Path(tempfile.mkdtemp(prefix="sluicegate-ttft-")) / "marks.json"
    children.temp_dirs.append(str(marks_path.parent))
    env = {"SLUICEGATE_TTFT_MARKS": str(marks_path)}
    wrap = (sys.executable, str(MARKS_RUNNER))
    with gateway_stack(children, {MODEL: url}, gw_cpus, rest_cpus, wrap=wrap, env=env) as stack:
        gw = stack.gateway_pid
        # The bare proxy with a Redis round trip before each request (an INCR) and one after it (an
        # INCRBY), on the gateway's Redis: the least any gateway that admits and meters through
        # Redis adds, on this machine, in this run.
        admitting_port, admitting = start_bare_proxy(
            children, "bare proxy + Redis", url, gw_cpus, redis_url=stack.redis_url
        )
        body = chat_body(MODEL, stream=True, max_tokens=TOKENS)

        def marks() -> list[dict[str, float]]:
            os.kill(gw, signal.SIGUSR1)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if marks_path.exists():
                    kept: list[dict[str, float]] = json.loads(marks_path.read_text())
                    marks_path.unlink()
                    return kept
                time.sleep(0.05)
            raise RuntimeError("the gateway wrote no marks")

        async def phases() -> dict[str, Any]:
            async with open_session() as session:
                pids = [os.getpid(), worker.pid, bare.pid, admitting.pid, gw, *stack.redis_pids]
                monitor = Monitor(pids, 0)
                load = Load(session, monitor, gw)
                targets = {
                    "direct": Target(url),
                    "bare proxy": Target(f"http://127.0.0.1:{bare_port}", pid=bare.pid),
                    "bare + Redis": Target(f"http://127.0.0.1:{admitting_port}", pid=admitting.pid),
                    "gateway": Target(stack.base, stack.api_key, pid=gw),
                }
                for target in targets.values():
                    await load.phase(
                        target, body, name="warm-up", concurrency=CONCURRENCY, duration_s=1.0,
                        stream=True, monitor=False,
                    )  # fmt: skip
                marks()  # the warm-up's
                return await load.sides(
                    targets, body, rounds=args.rounds, side_s=args.side_s, name="paced",
                    concurrency=CONCURRENCY, stream=True, expect_events=TOKENS + 2,
                )  # fmt: skip

        pooled = uvloop.run(phases())
        kept = [m for m in marks() if "out1" in m and "admit1" in m]
    direct = median_ms(pooled["direct"].ttft_s)
    lines = [
        *facts,
        "",
        f"time to first token, {CONCURRENCY} concurrent {TOKENS}-token streams paced "
        f"{args.token_delay_ms:g} ms/token, {args.rounds} rounds x {args.side_s:g} s per side",
        f"  direct p50 {direct:.3f} ms",
    ]
    for side in ("bare proxy", "bare + Redis", "gateway"):
        result = pooled[side]
        added = median_ms(result.ttft_s) - direct
        cpu = (result.cpu_s or 0.0) / max(result.events, 1) * 1e6
        lines.append(
            f"  {side:<12} p50 +{added:.3f} ms over direct ({len(result.ttft_s)} streams, "
            f"{result.errors} errors, CPU {cpu:.1f} us per event)"
        )
    lines += ["", f"the gateway's way to the first token, medians of {len(kept)} streams:"]
    for label, start, end in STEPS:
        lines.append(f"  {label:<36} {median_ms([m[end] - m[start] for m in kept]):7.3f} ms")
    waiting = [m for m in kept if "redis_resumed" in m]
    if waiting:
        batches = [m["relayed_waiting"] for m in waiting]
        busy = median_ms([m["cpu_waiting"] for m in waiting])
        lines.append(
            f"  while the reply waited for its call to resume: the gateway's thread on CPU {busy:.3f} ms "
            f"(median); other streams' event batches relayed: median {statistics.median(batches):g}, "
            f"none in {sum(1 for n in batches if n == 0)} of {len(batches)}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=4, help="rounds of the three sides (4)")
    parser.add_argument("--side-s", type=float, default=1.5, help="seconds per side per round (1.5)")
    parser.add_argument("--token-delay-ms", type=float, default=2.0, help="the worker's pause per token (2)")
    args = parser.parse_args(argv)
    return cli.print_report(600, lambda children: run(args, children))


if __name__ == "__main__":
    sys.exit(main())
