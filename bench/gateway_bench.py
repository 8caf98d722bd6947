"""Sluicegate gateway benchmark: the gateway against a bare pass-through proxy, in the same run.

Starts a throwaway Redis, the raw-asyncio mock worker (bench/mock_worker.py), the gateway
(`python -m gateway serve`) and bare pass-through proxies (bench/bare_proxy.py: Starlette + aiohttp,
no auth, no Redis; and, for the time-to-first-token phases, the same proxy with one Redis round
trip per request: the least any gateway that admits through Redis adds) as child processes; pins
the gateway and the proxies to one CPU (only one of them is ever under load: their phases take
turns) and everything else (Redis, the mock workers, this load generator) to the other CPU(s);
warms up; runs bounded load phases; prints a table with PASS/MISS against the targets, a second one
setting direct, bare proxy and gateway side by side, and a third one setting the gateway's three
client APIs side by side (chat; Anthropic Messages and OpenAI Responses, which the gateway
translates to the worker's chat contract). Every child is stopped on
exit, on Ctrl-C, on SIGTERM, and by a hard watchdog if anything hangs.

    .venv/bin/python bench/gateway_bench.py            # full run, about 3 min
    .venv/bin/python bench/gateway_bench.py --quick    # smoke run, about 70 s
    .venv/bin/python bench/gateway_bench.py --chat-only   # without the translated APIs, about 2 min
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
from harness.cpu import Monitor, machine_facts, memory_kib, pin, split_cpus
from harness.load import APIS, Load, PhaseResult, Target, chat_body, open_session, percentile
from harness.procs import Children, gateway_stack, start_announcing, start_bare_proxy
from harness.profile import find_py_spy, profile_phases, report_profiles
from harness.redis_stats import CommandStats, describe
from harness.report import Table, compose, disturbance, phase_line

MOCK_WORKER = Path(__file__).resolve().parent / "mock_worker.py"
MODEL = "bench-model"
PACED_MODEL = "bench-model-paced"
TTFT_MODEL = "bench-model-ttft"
SATURATION_CONCURRENCY = 48
STREAM_CONCURRENCY = 16
TOKENS = 64  # content deltas per streamed answer
PACED_DELAY_MS = 2.0  # the paced worker's pause before each content delta
TTFT_DELAY_MS = 1.0  # the TTFT worker's pause after the first content delta (see bench/README.md)
PREFILL_MS = 0.0  # the TTFT and paced workers' pause before the first content delta

# Targets (printed with PASS/MISS).
TARGET_CPU_MS_PER_REQUEST = 0.5
TARGET_REQS_PER_CORE = 2000.0
TARGET_ADDED_P50_C1_MS = 0.8
TARGET_ADDED_TTFT_MS = 1.5
TARGET_CPU_US_PER_CHUNK = 50.0
# Against the bare proxy, measured in the same run (issue 10).
TARGET_CPU_RATIO = 2.5  # gateway CPU per request / bare proxy CPU per request
TARGET_TTFT_OVER_PROXY_MS = 0.5  # gateway added TTFT p50 - bare proxy added TTFT p50
# The translated client APIs (Anthropic Messages, OpenAI Responses) against chat, same run.
TARGET_API_CPU_RATIO = 1.25  # their CPU per request / chat's, non-stream and streamed
TRANSLATED = ("messages", "responses")
# The side of the TTFT phases that is the bare proxy plus its Redis round trips (admit, settle).
BARE_REDIS = "bare + Redis"  # the client APIs besides chat, by harness.load.APIS name

# Gateway phases whose Redis commands are broken down per command name in the details.
_GATEWAY_COMMANDS = ("evalsha", "eval", "hgetall", "hmget")  # the request-path round trips


@dataclass
class Plan:
    warmup_s: float
    saturation_s: float  # per side (bare proxy, gateway), in two slices
    saturation_concurrency: int
    rounds: int  # of every direct / bare proxy / gateway comparison
    latency_side_s: float
    c16_side_s: float
    ttft_side_s: float
    stream_side_s: float
    stream_concurrency: int
    paced_side_s: float
    paced_delay_ms: float
    ttft_delay_ms: float
    prefill_ms: float
    tokens: int
    profile_s: float
    apis: tuple[str, ...]  # the translated client APIs measured besides chat (TRANSLATED, or none)

    @classmethod
    def make(cls, quick: bool, chat_only: bool = False) -> Plan:
        return cls(
            warmup_s=1.5 if quick else 3.0,
            saturation_s=3.0 if quick else 8.0,
            saturation_concurrency=SATURATION_CONCURRENCY,
            rounds=2 if quick else 4,
            latency_side_s=1.0 if quick else 1.5,
            c16_side_s=0.75 if quick else 1.0,
            ttft_side_s=1.0 if quick else 1.5,
            stream_side_s=1.5 if quick else 2.0,
            stream_concurrency=STREAM_CONCURRENCY,
            paced_side_s=1.25 if quick else 1.5,
            paced_delay_ms=PACED_DELAY_MS,
            ttft_delay_ms=TTFT_DELAY_MS,
            prefill_ms=PREFILL_MS,
            tokens=TOKENS,
            profile_s=4.0 if quick else 6.0,
            apis=() if chat_only else TRANSLATED,
        )

    def length_s(self, profile: bool) -> float:
        sides = (
            self.latency_side_s + self.c16_side_s + self.ttft_side_s + self.stream_side_s + self.paced_side_s
        )
        apis = len(self.apis)
        return (
            self.warmup_s * (1 + apis / 4)  # the APIs' warm-up adds the stream and non-stream quarters
            + (2 + apis) * self.saturation_s  # bare proxy, gateway (chat), gateway per other API
            + self.saturation_s  # every limit, gateway only
            + self.rounds * 3 * sides  # direct, bare proxy, gateway
            + self.rounds * (self.ttft_side_s + self.paced_side_s)  # the bare proxy + Redis
            + self.rounds * apis * (self.ttft_side_s + self.stream_side_s)  # the APIs' extra sides
            + ((5 + 2 * apis) * (self.profile_s + 20) if profile else 0)
        )


async def measure(
    load: Load,
    direct: dict[str, Target],
    proxy: dict[str, Target],
    gateway: Target,
    limited: Target,
    apis: dict[str, Target],
    admitting: dict[str, Target],
    plan: Plan,
    args: argparse.Namespace,
    step: Callable[[str], None],
) -> dict[str, Any]:
    """The phases, in order. `direct` and `proxy` map each model to its worker and to the bare proxy
    in front of it; `gateway` and `limited` are the gateway with the two keys; `apis` the gateway's
    other client APIs (`plan.apis`), labelled "gateway <api>": their sides join the saturation,
    TTFT c=1 and unpaced stream phases, taken in turn with the chat path's. `admitting` maps the
    TTFT models to a bare proxy that takes two Redis round trips per request ("bare + Redis"), a side
    of both TTFT phases."""
    whole = chat_body(MODEL, stream=False)
    streamed = chat_body(MODEL, stream=True)
    ttft_body = chat_body(TTFT_MODEL, stream=True)
    paced = chat_body(PACED_MODEL, stream=True)
    expect = plan.tokens + 2  # role chunk + content deltas + [DONE]; the usage chunk is stripped
    gw = load.gateway_pid
    results: dict[str, Any] = {"monitor": load.monitor}

    def three(model: str) -> dict[str, Target]:
        return {"direct": direct[model], "bare proxy": proxy[model], "gateway": gateway}

    translated = {f"gateway {name}": target for name, target in apis.items()}

    step("warm-up")
    for body, model, stream in (
        (whole, MODEL, False),
        (streamed, MODEL, True),
        (ttft_body, TTFT_MODEL, True),
        (paced, PACED_MODEL, True),
    ):
        # At the phases' concurrency, so that connection pools (the gateway's Redis pool included)
        # have grown before anything is measured.
        concurrency = plan.stream_concurrency if stream else plan.saturation_concurrency
        warm = [*three(model).values(), *(translated.values() if model != PACED_MODEL else ())]
        for target in warm:
            await load.phase(
                target, body, name="warmup", concurrency=concurrency, duration_s=plan.warmup_s / 12,
                stream=stream, monitor=False,
            )  # fmt: skip
    results["rss_after_warmup_kib"] = memory_kib(gw)

    half = plan.saturation_s / 2
    saturated = {"bare proxy": proxy[MODEL], "gateway": gateway, **translated}
    step(
        f"saturation, non-stream, c={plan.saturation_concurrency}, 2 x {len(saturated)} x {half:g} s "
        f"({', '.join(saturated)})"
    )
    results["saturation"] = await load.sides(
        saturated, whole, rounds=2, side_s=half, name="saturation",
        concurrency=plan.saturation_concurrency, stream=False, raw=True,
    )  # fmt: skip

    step(f"saturation with every limit on key and team, c={plan.saturation_concurrency}")
    results["limited"] = await load.phase(
        limited,
        whole,
        name="all limits",
        concurrency=plan.saturation_concurrency,
        duration_s=plan.saturation_s,
        stream=False,
        cpu_pid=gw,
        redis_commands=True,
        raw=True,
    )

    rounds = plan.rounds
    paced_what = f"{plan.tokens}-token streams paced {plan.paced_delay_ms:g} ms/token"
    for key, model, body, concurrency, side_s, what in (
        ("c1", MODEL, whole, 1, plan.latency_side_s, "added latency"),
        ("c16", MODEL, whole, 16, plan.c16_side_s, "added latency"),
        ("ttft", TTFT_MODEL, ttft_body, 1, plan.ttft_side_s, f"TTFT, {plan.prefill_ms:g} ms prefill"),
        (
            "stream",
            MODEL,
            streamed,
            plan.stream_concurrency,
            plan.stream_side_s,
            f"{plan.tokens}-token streams",
        ),
        ("paced", PACED_MODEL, paced, plan.stream_concurrency, plan.paced_side_s, paced_what),
    ):
        targets = three(model)
        if key in ("ttft", "stream"):
            targets.update(translated)
        if key in ("ttft", "paced"):
            targets[BARE_REDIS] = admitting[model]
        step(f"{what}, c={concurrency}, {rounds} x {len(targets)} x {side_s:g} s ({', '.join(targets)})")
        stream = key in ("ttft", "stream", "paced")
        name = {"c1": "latency c=1", "c16": "latency c=16", "ttft": "ttft c=1"}.get(
            key, f"{key} c={concurrency}"
        )
        results[key] = await load.sides(
            targets, body, rounds=rounds, side_s=side_s, name=name, concurrency=concurrency,
            stream=stream, expect_events=expect if stream else None,
        )  # fmt: skip
    results["rss_after_run_kib"] = memory_kib(gw)
    proxy_pid = proxy[MODEL].pid
    assert proxy_pid is not None
    results["proxy_rss_after_run_kib"] = memory_kib(proxy_pid)

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
        for api, target in apis.items():
            results["profiles"].update(
                await profile_phases(
                    load,
                    target,
                    [
                        (f"{api}-nonstream", whole, plan.saturation_concurrency, False),
                        (f"{api}-stream", streamed, plan.stream_concurrency, True),
                    ],
                    plan.profile_s,
                    Path(args.profile),
                    args.py_spy,
                    step,
                )
            )
        results["profiles"].update(
            await profile_phases(
                load,
                proxy[MODEL],
                [
                    ("bare-proxy-nonstream", whole, plan.saturation_concurrency, False),
                    ("bare-proxy-stream", streamed, plan.stream_concurrency, True),
                ],
                plan.profile_s,
                Path(args.profile),
                args.py_spy,
                step,
                pid=proxy_pid,
            )
        )
    return results


def _ms(x: float) -> str:
    return f"{x:.3f}"


def _plus(x: float) -> str:
    return f"{x:+.3f}"


def _cpu_ms(ph: PhaseResult) -> float:
    return 1000 * ph.cpu_s / ph.requests if ph.cpu_s is not None and ph.requests else float("nan")


def _per_chunk_us(ph: PhaseResult) -> float:
    return 1e6 * ph.cpu_s / ph.events if ph.cpu_s is not None and ph.events else float("nan")


def _busy(ph: PhaseResult) -> float:
    return ph.cpu_s / ph.wall_s if ph.cpu_s is not None and ph.wall_s else 0.0


def report(results: dict[str, Any], plan: Plan, facts: list[str]) -> tuple[str, dict[str, Any]]:
    table = Table()
    summary: dict[str, Any] = {}
    sat: PhaseResult = results["saturation"]["gateway"]
    cpu_ms = _cpu_ms(sat)
    per_core = 1000 / cpu_ms if cpu_ms else float("nan")
    busy = _busy(sat)
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
    limited_ms = _cpu_ms(limited)
    # Rounded: a key or team lookup per second (cache refresh) is not a per-request cost.
    sent = sum(limited.redis_commands.get(name, 0) for name in _GATEWAY_COMMANDS)
    commands = round(sent / limited.requests, 2) if limited.requests else float("nan")
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
    redis_phases = {
        "saturation, rpm key": sat,
        "every limit": limited,
        "latency c=1": results["c1"]["gateway"],
        "streams c=16": results["stream"]["gateway"],
    }
    script_exists = {
        name: ph.redis_commands.get("script|exists", 0) / ph.requests if ph.requests else float("nan")
        for name, ph in redis_phases.items()
    }
    table.row(
        "Redis SCRIPT EXISTS per request (c=48; every limit; c=1; streams c=16)",
        "; ".join(f"{v:.3f}" for v in script_exists.values()),
    )
    summary["redis_script_exists_per_request"] = script_exists
    summary["redis_commands_per_request"] = {
        name: {cmd: n / ph.requests for cmd, n in ph.redis_commands.items()} if ph.requests else {}
        for name, ph in redis_phases.items()
    }

    for key, label in (("c1", "c=1"), ("c16", "c=16")):
        d, g = results[key]["direct"], results[key]["gateway"]
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
    d, g = results["ttft"]["direct"], results["ttft"]["gateway"]
    for q in (50, 99):
        added = 1000 * (percentile(g.ttft_s, q) - percentile(d.ttft_s, q))
        metric = f"added time to first token p{q}, {plan.tokens}-token stream, c=1"
        table.check(
            metric, added, f"{added:.3f} ms", "<=", TARGET_ADDED_TTFT_MS, f"{TARGET_ADDED_TTFT_MS} ms"
        )
        summary[f"added_ttft_p{q}_ms"] = added
    for key, label in (("stream", "unpaced"), ("paced", f"paced {plan.paced_delay_ms:g} ms/token")):
        ph: PhaseResult = results[key]["gateway"]
        per_chunk = _per_chunk_us(ph)
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
            f"{100 * _busy(ph):.0f}% busy",
        )
        summary[f"cpu_us_per_chunk_{key}"] = per_chunk
    rss, warm = results["rss_after_run_kib"], results["rss_after_warmup_kib"]
    table.row(
        "gateway RSS after run (after warm-up; peak)",
        f"{rss['VmRSS'] / 1024:.1f} MiB",
        f"({warm['VmRSS'] / 1024:.1f}; {rss['VmHWM'] / 1024:.1f})",
    )
    summary["rss_mib"] = rss["VmRSS"] / 1024

    versus, proxy_summary = compare(results, plan)
    summary["bare_proxy"] = proxy_summary
    more = [
        (
            "gateway vs bare proxy (bench/bare_proxy.py; same run, same CPU, phases taken in turn; "
            "latency and TTFT rows: direct = absolute ms, proxy and gateway = ms added over direct)",
            versus,
        )
    ]
    if plan.apis:
        by_api, api_summary = compare_apis(results, plan)
        summary["apis"] = api_summary
        more.append(
            (
                "client APIs through the gateway (Messages and Responses translated to the worker's chat "
                "contract; same run, their phases taken in turn with chat's; CPU rows: ms and the ratio "
                "to chat; TTFT rows: direct = absolute ms, the APIs = ms added over direct)",
                by_api,
            )
        )

    details = [
        "details (latency in ms; added = proxy or gateway percentile - direct percentile; "
        "CPU per request of the proxy or gateway in front):"
    ]
    sides = [*results["saturation"].values()]
    for label, ph in results["saturation"].items():
        details.append(
            phase_line(ph, ph.latencies_s, 28, server="proxy" if label == "bare proxy" else "gateway")
        )
    details.append(phase_line(limited, limited.latencies_s, 28))
    for key in ("c1", "c16", "ttft", "stream", "paced"):
        for label, ph in results[key].items():
            sides.append(ph)
            samples = ph.latencies_s if key in ("c1", "c16") else ph.ttft_s
            server = "proxy" if label.startswith("bare") else "gateway"
            details.append(phase_line(ph, samples, 28, server=server))
    details.append(
        "  (ttft and stream phases: percentiles of the time to first token; for Messages and Responses "
        "the first event carrying text)"
    )
    for label, ph in results["saturation"].items():
        assert ph.cpu_s is not None
        own, idle = ("bare proxies", "gateway") if label == "bare proxy" else ("gateway", "bare proxies")
        others = ", ".join(f"{name} {secs:.2f} s" for name, secs in ph.cpu_of.items() if name != own)
        details.append(
            f"  saturation {label}: {ph.requests} requests in {ph.wall_s:.2f} s, its CPU {ph.cpu_s:.2f} s "
            f"({100 * _busy(ph):.0f}% of its core); CPU of the others: {others} "
            f"(the idle {idle} on the same core)"
        )
    details.append("  Redis commands per request (INFO commandstats diffed over the gateway's slices):")
    for name, ph in redis_phases.items():
        details.append(f"    {name}: {describe(ph.redis_commands, ph.requests)}")
    notes = []
    if busy < 0.9:
        notes.append(
            f"the gateway core was only {100 * busy:.0f}% busy at saturation: the load-generator side "
            "(or other processes, see above) limited throughput, so req/s understates the gateway; "
            "CPU per request still holds"
        )
    proxy_busy = _busy(results["saturation"]["bare proxy"])
    if proxy_busy < 0.9:
        notes.append(
            f"the bare proxy's core was {100 * proxy_busy:.0f}% busy at saturation (the load generator's "
            "core is the limit): below saturation a server serves fewer requests per event-loop wake-up, "
            "so its CPU per request is somewhat higher than at saturation and the gateway/proxy ratio "
            "flatters the gateway"
        )
    phases = [*sides, limited]
    lines, more_notes = disturbance(phases, results["monitor"])
    summary["errors"] = sum(ph.errors for ph in phases)
    out = compose(facts, table, details + lines, notes + more_notes, *more)
    return "\n".join(out + report_profiles(results.get("profiles", {}))), summary


def compare(results: dict[str, Any], plan: Plan) -> tuple[Table, dict[str, Any]]:
    """The side-by-side table: direct, bare proxy, gateway."""
    table = Table(("metric", "direct", "bare proxy", "gateway", "gateway vs proxy", "target", "result"))
    summary: dict[str, Any] = {}
    p, g = results["saturation"]["bare proxy"], results["saturation"]["gateway"]
    ratio = _cpu_ms(g) / _cpu_ms(p)
    table.check_cells(
        f"CPU per request, non-stream, c={g.concurrency} (ms)",
        ["", _ms(_cpu_ms(p)), _ms(_cpu_ms(g)), f"{ratio:.2f}x"],
        ratio,
        "<=",
        TARGET_CPU_RATIO,
        f"{TARGET_CPU_RATIO:g}x",
    )
    table.row(
        "  req/s (its core busy)",
        "",
        f"{p.rps:,.0f} ({100 * _busy(p):.0f}%)",
        f"{g.rps:,.0f} ({100 * _busy(g):.0f}%)",
    )
    summary.update(cpu_ms_per_request=_cpu_ms(p), rps=p.rps, busy=_busy(p), cpu_ratio=ratio)
    p1, g1 = results["c1"]["bare proxy"], results["c1"]["gateway"]
    table.row(
        "CPU per request, non-stream, c=1 (ms)",
        "",
        _ms(_cpu_ms(p1)),
        _ms(_cpu_ms(g1)),
        f"{_cpu_ms(g1) / _cpu_ms(p1):.2f}x",
    )
    summary["cpu_ms_per_request_c1"] = _cpu_ms(p1)
    streams = f"c={plan.stream_concurrency}, {plan.tokens}-token streams"
    rows = [
        ("c1", "latency", "non-stream, c=1", False, False),
        ("c16", "latency", "non-stream, c=16", False, False),
        ("ttft", "TTFT", f"c=1, {plan.prefill_ms:g} ms prefill", True, True),
        (
            "paced",
            "TTFT",
            f"{streams}, {plan.prefill_ms:g} ms prefill, {plan.paced_delay_ms:g} ms/token",
            True,
            True,
        ),
        # Every event back to back: the closed loop is throughput-bound, so this is mostly queueing.
        ("stream", "TTFT", f"{streams}, unpaced (throughput-bound)", True, False),
    ]
    for key, what, label, ttft, checked in rows:
        sides = results[key]
        for q in (50, 99):
            pct = {
                side: 1000 * percentile(ph.ttft_s if ttft else ph.latencies_s, q)
                for side, ph in sides.items()
            }
            added_p, added_g = pct["bare proxy"] - pct["direct"], pct["gateway"] - pct["direct"]
            over = added_g - added_p
            cells = [_ms(pct["direct"]), _plus(added_p), _plus(added_g), _plus(over)]
            metric = f"{what} p{q}, {label}"
            if checked and q == 50:
                limit = TARGET_TTFT_OVER_PROXY_MS
                table.check_cells(metric, cells, over, "<=", limit, f"+{limit:g} ms")
            else:
                table.row(metric, *cells)
            summary[f"added_{what.lower()}_p{q}_{key}_ms"] = added_p
            summary[f"gateway_over_proxy_{what.lower()}_p{q}_{key}_ms"] = over
            if BARE_REDIS in pct:
                # The floor for any gateway that admits through Redis: the bare proxy's own path
                # plus one round trip, beside the gateway (the proxy column: that proxy's).
                added_r = pct[BARE_REDIS] - pct["direct"]
                table.row(
                    f"  vs the bare proxy + its Redis round trips (INCR; INCRBY after), p{q}",
                    "",
                    _plus(added_r),
                    _plus(added_g),
                    _plus(added_g - added_r),
                )
                summary[f"added_{what.lower()}_p{q}_{key}_bare_redis_ms"] = added_r
    for key, label in (("stream", "unpaced"), ("paced", f"paced {plan.paced_delay_ms:g} ms/token")):
        p, g = results[key]["bare proxy"], results[key]["gateway"]
        table.row(
            f"CPU per streamed chunk, {label}, c={g.concurrency} (us)",
            "",
            f"{_per_chunk_us(p):.1f}",
            f"{_per_chunk_us(g):.1f}",
            f"{_per_chunk_us(g) / _per_chunk_us(p):.2f}x",
        )
        table.row(
            "  streams/s (its core busy)",
            f"{results[key]['direct'].rps:,.0f}",
            f"{p.rps:,.0f} ({100 * _busy(p):.0f}%)",
            f"{g.rps:,.0f} ({100 * _busy(g):.0f}%)",
        )
        summary[f"cpu_us_per_chunk_{key}"] = _per_chunk_us(p)
    p_rss, g_rss = results["proxy_rss_after_run_kib"]["VmRSS"], results["rss_after_run_kib"]["VmRSS"]
    table.row("RSS after run (MiB)", "", f"{p_rss / 1024:.1f}", f"{g_rss / 1024:.1f}")
    summary["rss_mib"] = p_rss / 1024
    return table, summary


def compare_apis(results: dict[str, Any], plan: Plan) -> tuple[Table, dict[str, Any]]:
    """The client APIs side by side: CPU per request against chat's, TTFT added over direct."""
    apis = plan.apis
    table = Table(("metric", "direct", "chat", *apis, "target", "result"))
    summary: dict[str, Any] = {api: {} for api in apis}
    for key, label, unit in (
        ("saturation", f"non-stream, c={plan.saturation_concurrency}", "requests"),
        ("stream", f"{plan.tokens}-token streams, c={plan.stream_concurrency}, unpaced", "streams"),
    ):
        sides = results[key]
        chat = _cpu_ms(sides["gateway"])
        ratios = {api: _cpu_ms(sides[f"gateway {api}"]) / chat for api in apis}
        cells = ["", _ms(chat)]
        cells += [f"{_ms(_cpu_ms(sides[f'gateway {api}']))} ({ratios[api]:.2f}x)" for api in apis]
        table.check_cells(
            f"gateway CPU per request, {label} (ms)",
            cells,
            max(ratios.values()),
            "<=",
            TARGET_API_CPU_RATIO,
            f"{TARGET_API_CPU_RATIO:g}x chat",
        )
        table.row(
            f"  {unit}/s (gateway core busy)",
            "",
            *(
                f"{ph.rps:,.0f} ({100 * _busy(ph):.0f}%)"
                for ph in (sides["gateway"], *(sides[f"gateway {api}"] for api in apis))
            ),
        )
        for api in apis:
            summary[api][f"cpu_ms_per_request_{key}"] = _cpu_ms(sides[f"gateway {api}"])
            summary[api][f"cpu_ratio_to_chat_{key}"] = ratios[api]
    for key, label, checked in (
        ("ttft", "c=1", True),
        ("stream", f"c={plan.stream_concurrency}, unpaced (throughput-bound)", False),
    ):
        sides = results[key]
        for q in (50, 99):
            direct = 1000 * percentile(sides["direct"].ttft_s, q)
            added = {
                api: 1000 * percentile(sides[label_].ttft_s, q) - direct
                for api, label_ in (("chat", "gateway"), *((api, f"gateway {api}") for api in apis))
            }
            cells = [_ms(direct), *(_plus(added[api]) for api in ("chat", *apis))]
            metric = f"added time to first token p{q}, {label} (ms)"
            if checked and q == 50:
                worst = max(added[api] for api in apis)
                limit = TARGET_ADDED_TTFT_MS
                table.check_cells(metric, cells, worst, "<=", limit, f"{limit:g} ms")
            else:
                table.row(metric, *cells)
            for api in apis:
                summary[api][f"added_ttft_p{q}_{key}_ms"] = added[api]
    return table, summary


def run(plan: Plan, args: argparse.Namespace, children: Children) -> tuple[str, dict[str, Any]]:
    usable, gw_cpus, rest_cpus = split_cpus(args.no_pin)
    pinning = (
        f"gateway and bare proxies on CPU {sorted(gw_cpus)} (never loaded at the same time), "
        f"Redis + mock workers + load generator on CPU {sorted(rest_cpus)}"
        if gw_cpus and rest_cpus
        else "not pinned (fewer than 2 usable CPUs)"
    )
    facts = machine_facts(usable, pinning)
    pin(os.getpid(), rest_cpus)  # Redis and the workers inherit this
    workers = {}
    for model, token_ms, first_ms, prefill in (
        (MODEL, 0.0, 0.0, None),
        (TTFT_MODEL, 0.0, plan.ttft_delay_ms, plan.prefill_ms),
        (PACED_MODEL, plan.paced_delay_ms, 0.0, plan.prefill_ms),
    ):
        argv = [sys.executable, str(MOCK_WORKER), "--port", "0", "--tokens", str(plan.tokens)]
        argv += ["--token-delay-ms", str(token_ms), "--first-token-delay-ms", str(first_ms)]
        argv += [] if prefill is None else ["--prefill-ms", str(prefill)]
        workers[model] = start_announcing(children, model, argv, rest_cpus)
    base = {model: f"http://127.0.0.1:{port}" for model, (port, _) in workers.items()}
    proxies = {
        model: start_bare_proxy(children, f"bare proxy {model}", url, gw_cpus) for model, url in base.items()
    }
    with gateway_stack(children, base, gw_cpus, rest_cpus) as stack:
        gw = stack.gateway_pid
        # On the gateway's Redis: a round trip to it costs what one of the gateway's own does.
        admitting = {
            model: start_bare_proxy(
                children, f"bare proxy + Redis {model}", base[model], gw_cpus, redis_url=stack.redis_url
            )
            for model in (TTFT_MODEL, PACED_MODEL)
        }
        watch = {
            "load generator": [os.getpid()],
            "workers": [proc.pid for _, proc in workers.values()],
            "redis": stack.redis_pids,
            "gateway": [gw],
            "bare proxies": [proc.pid for _, proc in (*proxies.values(), *admitting.values())],
        }
        print("\n".join(facts), file=sys.stderr, flush=True)

        async def main() -> dict[str, Any]:
            commandstats = CommandStats(stack.redis_url)
            try:
                async with open_session() as session:
                    monitor = Monitor([pid for pids in watch.values() for pid in pids], args.wait_quiet)
                    load = Load(session, monitor, gw, watch, commandstats)
                    return await measure(
                        load,
                        {model: Target(url) for model, url in base.items()},
                        {
                            model: Target(f"http://127.0.0.1:{port}", pid=proc.pid)
                            for model, (port, proc) in proxies.items()
                        },
                        Target(stack.base, stack.api_key, pid=gw),
                        Target(stack.base, stack.limited_key, pid=gw),
                        {api: Target(stack.base, stack.api_key, pid=gw, api=APIS[api]) for api in plan.apis},
                        {
                            model: Target(f"http://127.0.0.1:{port}", pid=proc.pid)
                            for model, (port, proc) in admitting.items()
                        },
                        plan,
                        args,
                        children.step,
                    )
            finally:
                await commandstats.aclose()

        results = uvloop.run(main())
    return report(results, plan, facts)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = cli.parser(__doc__, "shorter phases: a ~50 s smoke run")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    parser.add_argument(
        "--chat-only",
        action="store_true",
        help="only the chat path: no Anthropic Messages or OpenAI Responses phases (a gateway without them)",
    )
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
    plan = Plan.make(args.quick, args.chat_only)
    children = Children()
    # Slack for a loaded machine, where slices run past their deadline while requests finish.
    limit_s = 60 + 1.5 * plan.length_s(bool(args.profile)) + args.wait_quiet
    return cli.run_to_report(children, limit_s, lambda: run(plan, args, children), plan, args.json)


if __name__ == "__main__":
    sys.exit(main())
