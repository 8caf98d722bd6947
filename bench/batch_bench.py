"""Batch bench (a skeleton: its batch phases need the gateway's /v1/files and /v1/batches, issue 44):
does a batch fill the idle capacity of a pool without interactive users noticing?

One pool of ENGINES fake engines with SLOTS fixed slots each (bench/harness/slot_engine.py, vLLM's
priority queue without its arithmetic) behind a real gateway (`python -m gateway serve`, its own
Redis, the model marked `engine_priority: true`). Per interactive load (a share of the pool's
capacity, paced as a Poisson process of streams):

  alone        interactive streams only: TTFT p50 and p99
  with batch   the same load beside a BATCH_LINES-line batch (the OpenAI SDK's files.create and
               batches.create against the gateway): TTFT p50 and p99, the batch's lines per second,
               and the share of the idle slot-time the batch used (its slot-seconds over the
               slot-seconds interactive requests left free, from each engine's /stats)

A load past the headroom the batch leaves shows how long a running batch line holds its slot: the
worst interactive wait for a first token beside the batch, next to a line's service time.
Targets (issue 45): the batch uses at least 80 % of the idle capacity; within the headroom
interactive TTFT p50 and p99 stay within 10 % of the run without the batch.

    .venv/bin/python bench/batch_bench.py                 # interactive phases; batch ones when served
    .venv/bin/python bench/batch_bench.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from harness.procs import Children, gateway_stack, guarded, start_announcing

ENGINES = 2
SLOTS = 4
PREFILL_MS = 20.0
TOKEN_MS = 5.0
TOKENS = 32
# A line's (and a stream's) time in a slot: what bounds an interactive wait past the headroom.
SERVICE_S = (PREFILL_MS + (TOKENS - 1) * TOKEN_MS) / 1000
CAPACITY_RPS = ENGINES * SLOTS / SERVICE_S
BATCH_LINES = 10_000
MODEL = "bench"
SLOT_ENGINE = Path(__file__).resolve().parent / "harness" / "slot_engine.py"


@dataclass
class Interactive:
    ttft_s: list[float] = field(default_factory=list)
    errors: int = 0

    def line(self) -> str:
        if not self.ttft_s:
            return f"no streams answered ({self.errors} errors)"
        cuts = statistics.quantiles(self.ttft_s, n=100, method="inclusive") if len(self.ttft_s) > 1 else []
        p50 = statistics.median(self.ttft_s)
        p99 = cuts[98] if cuts else p50
        worst = max(self.ttft_s)
        return (
            f"{len(self.ttft_s)} streams, TTFT p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
            f"max {worst * 1000:.1f} ms, {self.errors} errors"
        )


async def stream_once(session: aiohttp.ClientSession, base: str, key: str, out: Interactive) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": TOKENS,
        "stream": True,
    }
    sent = time.perf_counter()
    first: float | None = None
    try:
        async with session.post(
            f"{base}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}
        ) as response:
            if response.status != 200:
                out.errors += 1
                return
            async for line in response.content:
                if first is None and line.startswith(b"data: {") and b'"content":"x' in line:
                    first = time.perf_counter()
    except aiohttp.ClientError:
        out.errors += 1
        return
    if first is None:
        out.errors += 1
    else:
        out.ttft_s.append(first - sent)


async def paced(base: str, key: str, rate_rps: float, duration_s: float, seed: int) -> Interactive:
    """Streams arriving as a Poisson process at `rate_rps` for `duration_s`; waits for them all."""
    rng = random.Random(seed)
    out = Interactive()
    tasks: list[asyncio.Task[None]] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=120)
    ) as session:
        loop = asyncio.get_running_loop()
        start = loop.time()
        at = start
        while at - start < duration_s:
            at += rng.expovariate(rate_rps)
            await asyncio.sleep(max(0.0, at - loop.time()))
            tasks.append(asyncio.ensure_future(stream_once(session, base, key, out)))
        await asyncio.gather(*tasks)
    return out


def engine_stats(urls: list[str]) -> list[dict[str, object]]:
    stats = []
    for url in urls:
        with urllib.request.urlopen(f"{url}/stats", timeout=5) as response:  # noqa: S310 -- loopback
            stats.append(json.loads(response.read()))
    return stats


def batches_served(base: str, key: str) -> bool:
    request = urllib.request.Request(f"{base}/v1/batches", headers={"authorization": f"Bearer {key}"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=5):  # noqa: S310 -- loopback
            return True
    except urllib.error.HTTPError as exc:
        return exc.code != 404
    except OSError:
        return False


def run(args: argparse.Namespace, children: Children) -> None:
    urls = []
    for n in range(ENGINES):
        argv = [
            sys.executable,
            str(SLOT_ENGINE),
            "--port",
            "0",
            "--slots",
            str(SLOTS),
            "--policy",
            "priority",
        ]
        argv += ["--prefill-ms", str(PREFILL_MS), "--token-ms", str(TOKEN_MS), "--tokens", str(TOKENS)]
        port, _ = start_announcing(children, f"engine-{n}", argv, None)
        urls.append(f"http://127.0.0.1:{port}")
    extra = "".join(f"      - url: {url}\n" for url in urls[1:])
    model_yaml = (
        extra + f"    engine_priority: true\n    routing: {{max_inflight_per_endpoint: {SLOTS * 4}}}\n"
    )
    with gateway_stack(children, {MODEL: urls[0]}, None, None, model_yaml=model_yaml) as stack:
        print(
            f"pool: {ENGINES} engines x {SLOTS} slots, a stream holds a slot {SERVICE_S * 1000:.0f} ms: "
            f"capacity {CAPACITY_RPS:.1f} streams/s",
            flush=True,
        )
        with_batch = batches_served(stack.base, stack.api_key)
        for load in args.loads:
            rate = load * CAPACITY_RPS
            alone = asyncio.run(paced(stack.base, stack.api_key, rate, args.duration, seed=1))
            print(f"load {load:.0%} ({rate:.1f}/s) alone:      {alone.line()}", flush=True)
            if not with_batch:
                print(f"load {load:.0%} with batch: skipped (the gateway serves no /v1/batches yet)")
                continue
            # The batch phases (issue 44's engine): files.create(BATCH_LINES lines), batches.create,
            # the same paced load while it runs, lines/s from its request_counts, and the share of
            # idle slot-time it used from engine_stats() before and after.
            print(f"load {load:.0%} with batch: not written yet (needs the batch runner's API)")
        busy = engine_stats(urls)
        print("engines:", json.dumps([s["served"] for s in busy]))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short phases")
    parser.add_argument(
        "--loads",
        type=lambda text: [float(x) for x in text.split(",")],
        default=[0.5, 0.9],
        help="interactive loads as shares of capacity, comma-separated (default 0.5,0.9)",
    )
    args = parser.parse_args()
    args.duration = 5.0 if args.quick else 30.0
    children = Children()
    guarded(children, 900, lambda: run(args, children))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
