"""The load generator: closed loops of aiohttp clients on one shared keep-alive connector.

A phase runs `concurrency` clients for `duration_s`, each sending its next request when the last one
is answered; it stops at its deadline (requests in flight finish) and at 500,000 requests, and each
request times out after 15 s. `Load.interleaved` alternates direct and gateway phases.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from harness.cpu import Monitor, cpu_seconds, cpu_seconds_of

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
    def __init__(self, base: str, api_key: str | None = None) -> None:
        self.url = base + "/v1/chat/completions"
        self.headers = {"content-type": "application/json"}
        if api_key:
            self.headers["authorization"] = f"Bearer {api_key}"


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
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60, ttl_dns_cache=None),
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


class Load:
    """Phases against targets on one session; `monitor` names this benchmark's processes, and
    `watch` groups of them whose CPU every monitored phase records (`PhaseResult.cpu_of`)."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        monitor: Monitor,
        gateway_pid: int,
        watch: dict[str, list[int]] | None = None,
    ) -> None:
        self.session = session
        self.monitor = monitor
        self.gateway_pid = gateway_pid
        self.watch = watch or {}

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
        monitor: bool = True,
        wait_quiet: bool = True,
        count_tokens: bool = False,
    ) -> PhaseResult:
        """A closed loop of `concurrency` clients for `duration_s`. `gateway_cpu`: measure the
        gateway's CPU; `monitor`: measure foreign CPU (after waiting for quiet if `wait_quiet`);
        `count_tokens`: read completion tokens from each stream's usage chunk."""
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
        gateway_pid = self.gateway_pid if gateway_cpu else None
        cpu0 = cpu_seconds(gateway_pid) if gateway_pid else 0.0
        snap0 = self.monitor.snapshot() if monitor else None
        watched0 = {name: cpu_seconds_of(pids) for name, pids in self.watch.items()} if monitor else {}
        t_start = perf()
        deadline = loop.time() + duration_s
        async with asyncio.timeout(duration_s + REQUEST_TIMEOUT_S + 5):
            await asyncio.gather(*(client() for _ in range(concurrency)))
        result.wall_s = perf() - t_start
        if gateway_pid:
            await asyncio.sleep(0.05)  # let the per-request background metering finish
            result.cpu_s = cpu_seconds(gateway_pid) - cpu0
        if snap0:
            busy, ours, steal = self.monitor.snapshot()
            result.foreign_cpu_s = max(0.0, (busy - snap0[0]) - (ours - snap0[1]))
            result.steal_s = steal - snap0[2]
        for name, secs in watched0.items():
            result.cpu_of[name] = cpu_seconds_of(self.watch[name]) - secs
        result.requests = len(latencies)
        return result

    async def interleaved(
        self, direct: Target, gateway: Target, body: bytes, *, rounds: int, side_s: float, **kw: Any
    ) -> tuple[PhaseResult, PhaseResult]:
        """Alternates direct and gateway phases (order flipped every round) and pools the samples
        per side; `kw` goes to `phase` (name, concurrency, stream, count_tokens)."""
        name, concurrency = kw["name"], kw["concurrency"]
        pooled = {
            "direct": PhaseResult(f"{name} direct", concurrency),
            "gateway": PhaseResult(f"{name} gateway", concurrency),
        }
        for r in range(rounds):
            order = [("direct", direct), ("gateway", gateway)]
            if r % 2:
                order.reverse()
            for label, target in order:
                res = await self.phase(target, body, duration_s=side_s, gateway_cpu=label == "gateway", **kw)
                pooled[label].pool(res)
        return pooled["direct"], pooled["gateway"]
