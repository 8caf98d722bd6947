"""Sluicegate open-streams benchmark: gateway memory per open stream and CPU per relayed token at
1,000, 2,000 and 5,000 concurrent slow streams, beside the bare proxy (bench/bare_proxy.py) in the
same run; then what happens when the descriptor limit runs out.

Processes: a paced mock worker (bench/mock_worker.py, one token every 1.5 s per stream), the bare
proxy, a throwaway Redis and the gateway (`python -m gateway serve`, with a key whose limits allow
every stream, `max_inflight_per_endpoint` above N and SLUICEGATE_MAX_CONNECTIONS raised for the run),
and this script as the load client (harness/streamload.py: one asyncio.Protocol per stream). The
descriptor limit is raised here (soft to hard) and inherited by every child; the gateway's code is
untouched. For each N, a fresh worker, proxy and gateway; the proxy's side first, then the gateway's:

  warm-up (50 streams, cut after their first tokens) -> idle RSS -> open N streams at 250/s at
  most, 64 waiting for their head at most (the ramp follows the server) -> every stream open and
  past a token -> RSS -> a window of W s: server CPU / tokens relayed ->
  every stream ends (counted: finished normally or not) -> RSS after.

Streams are long enough (tokens x 1.5 s) that none ends before the window does, and none opens
in it: the window's CPU is relaying alone. The descriptor checks start a gateway with a soft limit
of 1,024: once with the default connection cap (the streams within it must all finish, those past
it must get 503 `server_busy`), once with the cap lifted so that descriptors really run out.

    .venv/bin/python bench/streams_bench.py                 # about 9 min
    .venv/bin/python bench/streams_bench.py --quick         # 200 and 500 streams, about 3 min
    .venv/bin/python bench/streams_bench.py --streams 500 --tracemalloc 10   # where memory goes
"""

from __future__ import annotations

import asyncio
import math
import os
import resource
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import uvloop
from harness import memtrace
from harness.cli import run_to_report
from harness.cpu import Monitor, cpu_seconds, machine_facts, memory_kib, pin, split_cpus
from harness.procs import Children, Stack, gateway_stack, start_announcing, start_bare_proxy
from harness.streamload import StreamLoad

MOCK_WORKER = Path(__file__).resolve().parent / "mock_worker.py"
MODEL = "bench-stream"
EXHAUSTION_NOFILE = 1024  # the gateway's soft descriptor limit in the descriptor checks
WARMUP_STREAMS = 50
MAX_LOG_LINES = 8
# On a busy 2-core machine the mock worker (sharing its core with this client and Redis) can take
# over the default 2 s to accept while thousands of streams open; three such connects eject the
# only endpoint and the next requests get 503 no_healthy_upstream. This bench measures memory and
# CPU, not the ejection policy.
SLOW_ACCEPT = "    timeouts:\n      connect: 10\n"
PATH = "/v1/chat/completions"
JSON = {"content-type": "application/json"}


@dataclass
class Plan:
    streams: list[int] = field(default_factory=lambda: [1000, 2000, 5000])
    token_delay_s: float = 1.5
    open_rate: float = 250.0  # streams opened per second
    max_pending: int = 64  # streams waiting for their head at once, at most: the ramp follows the server
    settle_s: float = 3.0  # after the last opens: every stream past at least one token
    window_s: float = 15.0
    exhaustion: bool = True
    bare: bool = True
    tracemalloc_frames: int = 0

    def tokens(self, streams: int) -> int:
        """Tokens per stream: the first stream opened outlives the window by 5 s, with room for
        a ramp 2.5 times as long as planned (it follows the server: `max_pending`)."""
        ramp = 2.5 * streams / self.open_rate
        return math.ceil((ramp + self.settle_s + self.window_s + 5) / self.token_delay_s)

    def side_s(self, streams: int) -> float:
        return 2 * streams / self.open_rate + self.tokens(streams) * self.token_delay_s + 10


def chat_body(tokens: int) -> bytes:
    messages = [{"role": "user", "content": "Say something slowly."}]
    return orjson.dumps({"model": MODEL, "messages": messages, "max_tokens": tokens, "stream": True})


@dataclass
class Side:
    name: str
    pid: int
    url: str
    headers: dict[str, str]


def gateway_side(stack: Stack) -> Side:
    headers = {"authorization": f"Bearer {stack.api_key}", **JSON}
    return Side("gateway", stack.gateway_pid, stack.base + PATH, headers)


async def wait_for(condition: Any, timeout_s: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


async def warm_up(side: Side, tokens: int, delay_s: float) -> None:
    """Streams cut after their first tokens: the relay's code and buffers exist before the idle RSS."""
    load = StreamLoad(side.url, side.headers, chat_body(tokens), tokens + 2)
    await load.open_streams(WARMUP_STREAMS, 500)
    await wait_for(lambda: load.events >= 2 * WARMUP_STREAMS, 3 * delay_s + 5)
    load.close()
    await asyncio.sleep(delay_s + 1)  # the server notices each cut at its next token at the latest


async def measure(side: Side, streams: int, plan: Plan, monitor: Monitor, log: Any) -> dict[str, Any]:
    tokens = plan.tokens(streams)
    await warm_up(side, tokens, plan.token_delay_s)
    idle = memory_kib(side.pid)["VmRSS"]
    load = StreamLoad(side.url, side.headers, chat_body(tokens), tokens + 2)
    log(f"{side.name}: opening {streams} streams of {tokens} tokens")
    ramp_started = asyncio.get_running_loop().time()
    await load.open_streams(streams, plan.open_rate, plan.max_pending)
    await wait_for(lambda: load.open + sum(load.failures.values()) >= streams, 30)
    await asyncio.sleep(plan.settle_s)
    opened = load.open
    ramp_s = asyncio.get_running_loop().time() - ramp_started - plan.settle_s
    rss_open = memory_kib(side.pid)["VmRSS"]
    cpu0, events0, machine0 = cpu_seconds(side.pid), load.events, monitor.snapshot()
    ends0 = load.finished + sum(load.failures.values())
    await asyncio.sleep(plan.window_s)
    cpu1, events1, machine1 = cpu_seconds(side.pid), load.events, monitor.snapshot()
    clean_window = load.finished + sum(load.failures.values()) == ends0 and load.open == opened
    rss_window = memory_kib(side.pid)["VmRSS"]
    log(f"{side.name}: window done, waiting for the streams to end")
    await wait_for(load.all_ended.is_set, tokens * plan.token_delay_s + 30)
    load.close()
    await asyncio.sleep(1.0)
    relayed = events1 - events0
    cpu = cpu1 - cpu0
    foreign = ((machine1[0] - machine0[0]) - (machine1[1] - machine0[1])) / plan.window_s
    return {
        "side": side.name,
        "streams": streams,
        "open": opened,
        "ramp_s": ramp_s,
        "idle_rss_kib": idle,
        "open_rss_kib": rss_open,
        "window_rss_kib": rss_window,
        "kib_per_stream": (rss_open - idle) / max(1, opened),
        "tokens_per_s": relayed / plan.window_s,
        "cpu_us_per_token": cpu / relayed * 1e6 if relayed else float("nan"),
        "cores": cpu / plan.window_s,
        "foreign_cores": foreign,
        "clean_window": clean_window,
        "finished": load.finished,
        "failures": dict(load.failures),
        "rss_after_kib": memory_kib(side.pid)["VmRSS"],
    }


async def descriptor_check(side: Side, opened: int, extra: int, tokens: int, plan: Plan) -> dict[str, Any]:
    """`opened` streams, then `extra` more once they are open; counts how each group ended."""
    body = chat_body(tokens)
    first = StreamLoad(side.url, side.headers, body, tokens + 2)
    await first.open_streams(opened, 200, plan.max_pending)
    await wait_for(lambda: first.open + sum(first.failures.values()) >= opened, 20)
    held = first.open
    late = StreamLoad(side.url, side.headers, body, tokens + 2)
    await late.open_streams(extra, 200)
    await wait_for(late.all_ended.is_set, 10)  # refusals are quick; any that streams runs on
    await wait_for(first.all_ended.is_set, tokens * plan.token_delay_s + 30)
    await wait_for(late.all_ended.is_set, tokens * plan.token_delay_s + 30)
    first.close()
    late.close()
    return {
        "first": opened,
        "first_open": held,
        "first_finished": first.finished,
        "first_failures": dict(first.failures),
        "late": extra,
        "late_finished": late.finished,
        "late_failures": dict(late.failures),
    }


def format_results(rows: list[dict[str, Any]], checks: list[tuple[str, dict[str, Any]]], plan: Plan) -> str:
    out = [
        "",
        "open streams: RSS per stream = (RSS with N open - idle RSS after warm-up) / N; CPU per token = "
        f"server CPU over a {plan.window_s:.0f} s window / SSE events relayed in it",
        "| N | side | ramp s | idle RSS MiB | RSS open MiB | KiB per stream | tokens/s | CPU µs per token | "
        "server cores | other load (cores) | finished normally | RSS after MiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        finished = f"{r['finished']}/{r['streams']}" + (f" {r['failures']}" if r["failures"] else "")
        mark = "" if r["clean_window"] else " (streams ended in the window)"
        idle, opened = r["idle_rss_kib"] / 1024, r["open_rss_kib"] / 1024
        out.append(
            f"| {r['streams']} | {r['side']} | {r['ramp_s']:.0f} | {idle:.1f} | {opened:.1f} | "
            f"{r['kib_per_stream']:.1f} | {r['tokens_per_s']:.0f} | {r['cpu_us_per_token']:.1f}{mark} | "
            f"{r['cores']:.2f} | {r['foreign_cores']:.2f} | {finished} | {r['rss_after_kib'] / 1024:.1f} |"
        )
    by_n: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_n.setdefault(r["streams"], {})[r["side"]] = r
    for n, sides in sorted(by_n.items()):
        if {"gateway", "bare proxy"} <= sides.keys():
            gw, bare = sides["gateway"], sides["bare proxy"]
            verdict = "PASS" if gw["kib_per_stream"] <= 40 else "MISS"
            out.append(
                f"N={n}: gateway {gw['kib_per_stream']:.1f} KiB/stream (target <= 40: {verdict}), "
                f"{gw['kib_per_stream'] / bare['kib_per_stream']:.2f}x the bare proxy's; CPU per token "
                f"{gw['cpu_us_per_token'] / bare['cpu_us_per_token']:.2f}x"
            )
    for title, c in checks:
        out.append(
            f"{title}: {c['first_finished']}/{c['first']} streams opened first finished normally "
            f"({c['first_open']} open; {c['first_failures'] or 'no failures'}); of {c['late']} later "
            f"connections {c['late_finished']} streamed to the end, the rest: {c['late_failures'] or 'none'}"
        )
    return "\n".join(out)


def log_tail(stack_tmp: Path) -> str:
    """What the gateway logged (level warning and up): counts, and its distinct lines, shortened."""
    text = (stack_tmp / "gateway.log").read_text(errors="replace")
    distinct = list(dict.fromkeys(line[:200] for line in text.splitlines()))
    return (
        f"gateway log: {text.count('Traceback')} tracebacks, "
        f"{text.count('Too many open files')} 'Too many open files', {len(text.splitlines())} lines"
        + "".join(f"\n    {line}" for line in distinct[:MAX_LOG_LINES])
    )


def run(plan: Plan, children: Children, gw_cpus: set[int] | None, rest_cpus: set[int] | None) -> str:
    def log(text: str) -> None:
        children.step(text)

    async def main() -> str:
        rows: list[dict[str, Any]] = []
        checks: list[tuple[str, dict[str, Any]]] = []
        notes: list[str] = []
        for n in plan.streams:
            tokens = plan.tokens(n)
            argv = [sys.executable, str(MOCK_WORKER), "--port", "0", "--tokens", str(tokens)]
            argv += ["--token-delay-ms", str(plan.token_delay_s * 1000)]
            worker_port, worker = start_announcing(children, "mock worker", argv, rest_cpus)
            upstream = f"http://127.0.0.1:{worker_port}"
            snaps, bare_snaps = (Path(tempfile.mkdtemp(prefix="sluicegate-snaps-")) for _ in range(2))
            children.temp_dirs += [str(snaps), str(bare_snaps)]
            frames = plan.tracemalloc_frames
            traced_bare = memtrace.wrap(bare_snaps, frames) if frames else ()
            bare_port, bare = start_bare_proxy(children, "bare proxy", upstream, gw_cpus, wrap=traced_bare)
            wrap = memtrace.wrap(snaps, frames) if frames else ()
            settings = {"SLUICEGATE_MAX_CONNECTIONS": str(n + WARMUP_STREAMS + 64)}
            routing = (
                f"    routing:\n      max_inflight_per_endpoint: {n + WARMUP_STREAMS + 64}\n{SLOW_ACCEPT}"
            )
            with gateway_stack(
                children,
                {MODEL: upstream},
                gw_cpus,
                rest_cpus,
                wrap=wrap,
                env=settings,
                model_yaml=routing,
            ) as stack:
                pids = [os.getpid(), worker.pid, bare.pid, stack.gateway_pid, *stack.redis_pids]
                monitor = Monitor(pids)
                gateway = gateway_side(stack)
                proxy = Side("bare proxy", bare.pid, f"http://127.0.0.1:{bare_port}{PATH}", dict(JSON))
                if frames:
                    if plan.bare:
                        notes += ["bare proxy:", *await traced(proxy, n, plan, bare_snaps), "", "gateway:"]
                    notes += await traced(gateway, n, plan, snaps)
                    continue
                for side in [proxy, gateway] if plan.bare else [gateway]:
                    rows.append(await measure(side, n, plan, monitor, log))
                notes.append(f"N={n}: " + log_tail(stack.tmp))
        if plan.exhaustion and not plan.tracemalloc_frames:
            checks += await exhaustion(plan, children, gw_cpus, rest_cpus, notes)
        return format_results(rows, checks, plan) + "\n" + "\n".join(notes)

    return uvloop.run(main())


async def traced(side: Side, n: int, plan: Plan, snaps: Path) -> list[str]:
    tokens = plan.tokens(n)
    await memtrace.start(snaps)
    await warm_up(side, tokens, plan.token_delay_s)
    before = await memtrace.snapshot(snaps, "idle")
    idle = memory_kib(side.pid)["VmRSS"]
    load = StreamLoad(side.url, side.headers, chat_body(tokens), tokens + 2)
    await load.open_streams(n, plan.open_rate, plan.max_pending)
    await wait_for(lambda: load.open + sum(load.failures.values()) >= n, 60)
    await asyncio.sleep(plan.settle_s)
    rss = memory_kib(side.pid)["VmRSS"]
    after = await memtrace.snapshot(snaps, "open")
    opened = load.open
    if load.failures or opened < n:
        lines = [f"tracemalloc: {opened} of {n} streams open, failures {dict(load.failures)}"]
    else:
        lines = []
    lines += [f"tracemalloc, {opened} open streams (RSS +{(rss - idle) / max(1, opened):.1f} KiB per stream, "
             "tracing included):"]  # fmt: skip
    lines += memtrace.breakdown(before, after, max(1, opened), top=25)
    load.close()
    return lines


async def exhaustion(
    plan: Plan, children: Children, gw_cpus: set[int] | None, rest_cpus: set[int] | None, notes: list[str]
) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    tokens = 8
    argv = [sys.executable, str(MOCK_WORKER), "--port", "0", "--tokens", str(tokens)]
    argv += ["--token-delay-ms", str(plan.token_delay_s * 1000)]
    routing = f"    routing:\n      max_inflight_per_endpoint: 100000\n{SLOW_ACCEPT}"
    # With the default cap (a connection past it: 503), and with the cap lifted past what the
    # descriptors allow (each stream takes two: the client's and the worker's).
    cap = (EXHAUSTION_NOFILE - 256 - 64) // 2  # gateway.edge.server.connection_cap's default
    for title, settings, first, extra in (
        (f"default cap ({cap}) at a soft limit of {EXHAUSTION_NOFILE}", {}, cap, 100),
        (f"cap lifted, soft limit {EXHAUSTION_NOFILE}", {"SLUICEGATE_MAX_CONNECTIONS": "100000"}, 400, 200),
    ):
        # Each stack stops every child when it ends: a fresh worker for each.
        worker_port, _ = start_announcing(children, "mock worker", argv, rest_cpus)
        upstream = f"http://127.0.0.1:{worker_port}"
        with gateway_stack(
            children, {MODEL: upstream}, gw_cpus, rest_cpus, env=settings, model_yaml=routing,
            nofile=EXHAUSTION_NOFILE,
        ) as stack:  # fmt: skip
            side = gateway_side(stack)
            children.step(f"descriptor check: {title}")
            out.append((title, await descriptor_check(side, first, extra, tokens, plan)))
            notes.append(f"{title}: " + log_tail(stack.tmp))
    return out


def main() -> int:
    from harness import cli

    parser = cli.parser(__doc__, "200 and 500 streams, a 5 s window")
    parser.add_argument("--streams", help="comma-separated stream counts (default 1000,2000,5000)")
    parser.add_argument("--no-bare", action="store_true", help="leave out the bare proxy's side")
    parser.add_argument("--no-exhaustion", action="store_true", help="leave out the descriptor checks")
    parser.add_argument("--window", type=float, help="seconds of the CPU window (default 15)")
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES",
                        help="only the gateway, traced: where its memory per stream goes")  # fmt: skip
    parser.add_argument("--no-pin", action="store_true")
    args = parser.parse_args()
    plan = Plan(bare=not args.no_bare, exhaustion=not args.no_exhaustion, tracemalloc_frames=args.tracemalloc)
    if args.quick:
        plan.streams, plan.window_s = [200, 500], 5.0
    if args.streams:
        plan.streams = [int(n) for n in args.streams.split(",")]
    if args.window:
        plan.window_s = args.window
    if plan.tracemalloc_frames:
        # Tracing slows the gateway down many times (past its Redis and connect timeouts when
        # requests pile up); the window is the snapshot's time.
        plan.open_rate, plan.max_pending, plan.window_s = 10.0, 8, 30.0
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * max(plan.streams) + 1024
    if hard != resource.RLIM_INFINITY and hard < need:
        parser.error(f"the hard descriptor limit ({hard}) is below the {need} this run needs")
    # Inherited by every child: the worker and the proxy hold one descriptor a stream, the gateway two.
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    usable, gw_cpus, rest_cpus = split_cpus(args.no_pin)
    pin(os.getpid(), rest_cpus)
    print("\n".join(machine_facts(usable, "gateway and bare proxy on CPU 0, the rest on CPU 1")))
    sides = 2 if plan.bare else 1
    planned = sum(sides * plan.side_s(n) + 10 for n in plan.streams) + (60 if plan.exhaustion else 0)
    children = Children()

    def work() -> tuple[str, dict[str, Any]]:
        return run(plan, children, gw_cpus, rest_cpus), {}

    return run_to_report(children, 1.5 * planned + 60, work, plan, args.json)


if __name__ == "__main__":
    sys.exit(main())
