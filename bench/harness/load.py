"""The load generator: closed loops of aiohttp clients on one shared keep-alive connector.

A phase runs `concurrency` clients for `duration_s`, each sending its next request when the last one
is answered; it stops at its deadline (requests in flight finish) and at 500,000 requests, and each
request times out after 15 s. `Load.sides` takes phases against several targets in turn (direct,
bare proxy, gateway) and pools them per target; `Load.interleaved` is its direct/gateway form.
`phase(raw=True)` uses the lean client of harness.rawload instead of aiohttp (non-stream only).
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from harness.cpu import Monitor, cpu_seconds, cpu_seconds_of
from harness.rawload import RawLoop

FIRST_TOKEN_MARK = b'"delta":{"content":"'  # the role chunk's delta starts with "role", not "content"
MAX_REQUESTS_PER_PHASE = 500_000
REQUEST_TIMEOUT_S = 15.0
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens":\s*(\d+)')


@dataclass
class PhaseResult:
    name: str
    concurrency: int
    wall_s: float = 0.0
    requests: int = 0
    errors: int = 0
    rejected: int = 0  # answered 429 (a full worker queue): not errors, not in requests
    latencies_s: list[float] = field(default_factory=list)
    ttft_s: list[float] = field(default_factory=list)
    events: int = 0
    tokens: int = 0  # completion tokens from the usage chunks (when counted)
    cpu_s: float | None = None  # the gateway's CPU over the phase, when measured
    cpu_of: dict[str, float] = field(default_factory=dict)  # CPU of each watched group of processes
    foreign_cpu_s: float = 0.0  # CPU used by processes other than this benchmark's
    steal_s: float = 0.0
    error_samples: list[str] = field(default_factory=list)
    redis_commands: dict[str, int] = field(default_factory=dict)  # INFO commandstats calls, diffed

    @property
    def rps(self) -> float:
        return self.requests / self.wall_s if self.wall_s else 0.0

    def note_error(self, what: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 3:
            self.error_samples.append(what)

    def pool(self, other: PhaseResult) -> None:
        """Adds another phase's samples and counters to this one."""
        if other.cpu_s is not None:
            self.cpu_s = (self.cpu_s or 0.0) + other.cpu_s
        for name in (
            "wall_s",
            "requests",
            "errors",
            "rejected",
            "events",
            "tokens",
            "foreign_cpu_s",
            "steal_s",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name, secs in other.cpu_of.items():
            self.cpu_of[name] = self.cpu_of.get(name, 0.0) + secs
        for name, calls in other.redis_commands.items():
            self.redis_commands[name] = self.redis_commands.get(name, 0) + calls
        self.error_samples += other.error_samples[: max(0, 3 - len(self.error_samples))]
        self.latencies_s += other.latencies_s
        self.ttft_s += other.ttft_s


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[round(q) - 1]


class Target:
    """Where a phase sends its requests; `pid`: the proxy or gateway process in front of the worker,
    whose CPU `Load.sides` measures (None: the worker itself, direct)."""

    def __init__(self, base: str, api_key: str | None = None, pid: int | None = None) -> None:
        self.url = base + "/v1/chat/completions"
        self.headers = {"content-type": "application/json"}
        if api_key:
            self.headers["authorization"] = f"Bearer {api_key}"
        self.pid = pid


def chat_body(model: str, stream: bool, max_tokens: int = 64, **extra: Any) -> bytes:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": "Say hello to the benchmark."}],
        "max_tokens": max_tokens,
    }
    if stream:
        body["stream"] = True
    body.update(extra)
    return json.dumps(body, separators=(",", ":")).encode()


def open_session() -> aiohttp.ClientSession:
    # Idle connections are dropped after 4 s, before uvicorn's 5 s keep-alive timeout closes them from
    # the server's side: reusing one the server is closing fails the request ("Can not write request
    # body"), which happens after waiting for quiet or between phases.
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=4, ttl_dns_cache=None),
        timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding"),
    )


def _first_token_at(head: bytes) -> bool:
    """Whether `head` holds a content delta with non-empty content."""
    at = head.find(FIRST_TOKEN_MARK)
    while at >= 0:
        after = head[at + len(FIRST_TOKEN_MARK) : at + len(FIRST_TOKEN_MARK) + 1]
        if after and after != b'"':
            return True
        at = head.find(FIRST_TOKEN_MARK, at + 1)
    return False


RedisCounter = Callable[[], Awaitable[dict[str, int]]]


class Load:
    """Phases against targets on one session; `monitor` names this benchmark's processes, and
    `watch` groups of them whose CPU every monitored phase records (`PhaseResult.cpu_of`);
    `redis_counter` reads Redis's per-command call counts (for `phase(redis_commands=True)`)."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        monitor: Monitor,
        gateway_pid: int,
        watch: dict[str, list[int]] | None = None,
        redis_counter: RedisCounter | None = None,
    ) -> None:
        self.session = session
        self.monitor = monitor
        self.gateway_pid = gateway_pid
        self.watch = watch or {}
        self.redis_counter = redis_counter

    async def phase(
        self,
        target: Target,
        body: bytes,
        *,
        name: str,
        concurrency: int,
        duration_s: float,
        stream: bool,
        expect_events: int | None = None,
        gateway_cpu: bool = False,
        cpu_pid: int | None = None,
        monitor: bool = True,
        wait_quiet: bool = True,
        count_tokens: bool = False,
        redis_commands: bool = False,
        raw: bool = False,
    ) -> PhaseResult:
        """A closed loop of `concurrency` clients for `duration_s`. `gateway_cpu`: measure the
        gateway's CPU (`cpu_pid`: that process's instead) into `cpu_s`; `monitor`: measure foreign
        CPU (after waiting for quiet if `wait_quiet`); `count_tokens`: read completion tokens from
        each stream's usage chunk; `redis_commands`: diff Redis's per-command call counts; `raw`:
        non-stream requests from the lean protocol client (harness.rawload) instead of aiohttp, on
        connections of its own, so that the load generator can saturate even a bare proxy."""
        result = PhaseResult(name, concurrency)
        loop = asyncio.get_running_loop()
        session = self.session
        headers = target.headers
        url = target.url
        latencies = result.latencies_s
        ttfts = result.ttft_s
        perf = time.perf_counter
        tail_len = 1024 if count_tokens else 32
        started = 0
        deadline = 0.0

        async def refused(response: aiohttp.ClientResponse, payload: bytes) -> None:
            if response.status == 429:
                result.rejected += 1
                await asyncio.sleep(0.01)
            else:
                result.note_error(f"HTTP {response.status}: {payload[:200]!r}")

        async def one_whole() -> None:
            t0 = perf()
            async with session.post(url, data=body, headers=headers) as response:
                payload = await response.read()
                if response.status != 200:
                    await refused(response, payload)
                    return
            latencies.append(perf() - t0)

        async def one_stream() -> None:
            t0 = perf()
            first: float | None = None
            head = b""
            events = 0
            last_nl = False
            tail = b""
            async with session.post(url, data=body, headers=headers) as response:
                if response.status != 200:
                    await refused(response, await response.read())
                    return
                async for chunk in response.content.iter_any():
                    if first is None:
                        head += chunk
                        if _first_token_at(head):
                            first = perf() - t0
                    events += chunk.count(b"\n\n") + (1 if last_nl and chunk[:1] == b"\n" else 0)
                    last_nl = chunk[-1:] == b"\n"
                    tail = (tail + chunk)[-tail_len:]
            end = perf()
            if first is None or not tail.endswith(b"data: [DONE]\n\n"):
                result.note_error(f"stream incomplete: first={first} tail={tail[-32:]!r}")
                return
            if expect_events is not None and events != expect_events:
                result.note_error(f"stream had {events} events, expected {expect_events}")
                return
            if count_tokens:
                usage = _COMPLETION_TOKENS.search(tail)
                if usage is None:
                    result.note_error(f"stream without usage: tail={tail[-200:]!r}")
                    return
                result.tokens += int(usage.group(1))
            result.events += events
            ttfts.append(first)
            latencies.append(end - t0)

        one = one_stream if stream else one_whole

        async def client() -> None:
            nonlocal started
            while loop.time() < deadline and started < MAX_REQUESTS_PER_PHASE:
                started += 1
                try:
                    await one()
                except (aiohttp.ClientError, TimeoutError) as exc:
                    result.note_error(f"{type(exc).__name__}: {exc}")
                    await asyncio.sleep(0.01)

        if monitor and wait_quiet:
            await self.monitor.wait_quiet()
        raw_loop = None
        if raw:  # connected before any counter is read
            assert not stream, "the raw client reads whole answers only"
            raw_loop = await RawLoop.open(url, headers, body, concurrency, latencies, MAX_REQUESTS_PER_PHASE)
        counter = self.redis_counter if redis_commands else None
        calls0 = await counter() if counter else {}
        gateway_pid = cpu_pid or (self.gateway_pid if gateway_cpu else None)
        cpu0 = cpu_seconds(gateway_pid) if gateway_pid else 0.0
        snap0 = self.monitor.snapshot() if monitor else None
        watched0 = {name: cpu_seconds_of(pids) for name, pids in self.watch.items()} if monitor else {}
        t_start = perf()
        deadline = loop.time() + duration_s
        async with asyncio.timeout(duration_s + REQUEST_TIMEOUT_S + 5):
            if raw_loop is not None:
                await raw_loop.run(duration_s)
            else:
                await asyncio.gather(*(client() for _ in range(concurrency)))
        result.wall_s = perf() - t_start
        if raw_loop is not None:
            raw_loop.close()
            for error in raw_loop.errors:
                result.note_error(error)
        if gateway_pid:
            await asyncio.sleep(0.05)  # let the per-request background metering finish
            result.cpu_s = cpu_seconds(gateway_pid) - cpu0
        if snap0:
            busy, ours, steal = self.monitor.snapshot()
            result.foreign_cpu_s = max(0.0, (busy - snap0[0]) - (ours - snap0[1]))
            result.steal_s = steal - snap0[2]
        for name, secs in watched0.items():
            result.cpu_of[name] = cpu_seconds_of(self.watch[name]) - secs
        if counter:
            calls1 = await counter()
            result.redis_commands = {
                n: c - calls0.get(n, 0) for n, c in calls1.items() if c > calls0.get(n, 0)
            }
        result.requests = len(latencies)
        return result

    async def interleaved(
        self, direct: Target, gateway: Target, body: bytes, *, rounds: int, side_s: float, **kw: Any
    ) -> tuple[PhaseResult, PhaseResult]:
        """Alternates direct and gateway phases (order flipped every round) and pools the samples
        per side; `kw` goes to `phase` (name, concurrency, stream, count_tokens)."""
        if gateway.pid is None:
            gateway = copy.copy(gateway)
            gateway.pid = self.gateway_pid
        pooled = await self.sides(
            {"direct": direct, "gateway": gateway}, body, rounds=rounds, side_s=side_s, **kw
        )
        return pooled["direct"], pooled["gateway"]

    async def sides(
        self, targets: dict[str, Target], body: bytes, *, rounds: int, side_s: float, **kw: Any
    ) -> dict[str, PhaseResult]:
        """Runs one phase per target in turn, `rounds` times, and pools the samples per target (by
        label). The order changes every round (reversed every other round, rotated every two), so
        no side always follows the same one. A target with a `pid` has that process's CPU measured,
        and, if it is the gateway, Redis's commands counted. `kw` goes to `phase` (name,
        concurrency, stream, expect_events, count_tokens)."""
        name, concurrency = kw.pop("name"), kw["concurrency"]
        pooled = {label: PhaseResult(f"{name} {label}", concurrency) for label in targets}
        labels = list(targets)
        for r in range(rounds):
            shift = (r // 2) % len(labels)
            order = labels[shift:] + labels[:shift]
            if r % 2:
                order.reverse()
            for label in order:
                target = targets[label]
                res = await self.phase(
                    target,
                    body,
                    name=f"{name} {label}",
                    duration_s=side_s,
                    cpu_pid=target.pid,
                    redis_commands=target.pid is not None and target.pid == self.gateway_pid,
                    **kw,
                )
                pooled[label].pool(res)
        return pooled
