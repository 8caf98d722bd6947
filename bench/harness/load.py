"""The load generator: closed loops of aiohttp clients on one shared keep-alive connector.

A phase runs `concurrency` clients for `duration_s`, each sending its next request when the last one
is answered; it stops at its deadline (requests in flight finish) and at 500,000 requests, and each
request times out after 15 s. `Load.sides` takes phases against several targets in turn (direct,
bare proxy, gateway) and pools them per target; `Load.interleaved` is its direct/gateway form.
`phase(raw=True)` uses the lean client of harness.rawload instead of aiohttp (non-stream only).

A phase's body is written as a chat request; a `Target` speaking another client API (`Api`: the
Anthropic Messages or OpenAI Responses route of the gateway) sends the same request in its own
shape, and its streams are read by its own first-token and end-of-stream markers.
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


@dataclass(frozen=True)
class Api:
    """One client API: its route, auth headers, the chat request re-written in its shape, and how
    its stream shows the first generated text and its end (a whole last event within the stream's
    last `tail_len` bytes, starting with one of `last_events`)."""

    name: str
    path: str
    first_token_mark: bytes  # followed by a non-empty string: the first event carrying text
    last_events: tuple[bytes, ...]  # what the last event starts with
    tail_len: int  # bytes of the stream's end kept to find the last event
    extra_events: int  # events per stream beyond the chat stream's, for the same worker stream
    _bodies: dict[bytes, bytes] = field(default_factory=dict, compare=False, repr=False)

    def headers(self, api_key: str | None) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if api_key and self.name == "messages":
            headers["x-api-key"] = api_key
            headers["anthropic-version"] = "2023-06-01"
        elif api_key:
            headers["authorization"] = f"Bearer {api_key}"
        return headers

    def body(self, chat: bytes) -> bytes:
        """`chat` (a body of `chat_body`) as this API's request: the same model, prompt, cap and
        stream flag (rendered once per body)."""
        if self.name == "chat":
            return chat
        cached = self._bodies.get(chat)
        if cached is not None:
            return cached
        given = json.loads(chat)
        out: dict[str, Any] = {"model": given["model"]}
        if self.name == "messages":
            out.update(messages=given["messages"], max_tokens=given["max_tokens"])
        else:
            out.update(input=given["messages"], max_output_tokens=given["max_tokens"])
        if given.get("stream"):
            out["stream"] = True
        rendered = json.dumps(out, separators=(",", ":")).encode()
        self._bodies[chat] = rendered
        return rendered

    def first_token_at(self, head: bytes) -> bool:
        """Whether `head` holds an event with non-empty generated text."""
        mark = self.first_token_mark
        at = head.find(mark)
        while at >= 0:
            after = head[at + len(mark) : at + len(mark) + 1]
            if after and after != b'"':
                return True
            at = head.find(mark, at + 1)
        return False

    def ended(self, tail: bytes) -> bool:
        """Whether the stream's last bytes are a whole last event of the right kind."""
        if not tail.endswith(b"\n\n"):
            return False
        start = tail.rfind(b"\n\n", 0, len(tail) - 2)
        if start < 0:
            return False
        return tail[start + 2 :].startswith(self.last_events)


# The gateway relays the chat stream as the worker wrote it (less the usage chunk it asked for):
# role chunk + content deltas + [DONE].
CHAT = Api("chat", "/v1/chat/completions", b'"delta":{"content":"', (b"data: [DONE]\n\n",), 32, 0)
# message_start (for the role chunk), content_block_start, a text_delta per content delta,
# content_block_stop, message_delta, message_stop: 3 more events than the chat stream.
MESSAGES = Api(
    "messages",
    "/v1/messages",
    b'"type":"text_delta","text":"',
    (b"event: message_stop\n",),
    128,
    3,
)
# response.created + response.in_progress (for the role chunk), output_item.added,
# content_part.added, an output_text.delta per content delta, output_text.done,
# content_part.done, output_item.done, then response.completed or response.incomplete (the
# mock worker finishes on "length"): 6 more events than the chat stream. The last event carries
# the whole response object.
RESPONSES = Api(
    "responses",
    "/v1/responses",
    b'"type":"response.output_text.delta","sequence_number":',
    (b"event: response.completed\n", b"event: response.incomplete\n"),
    8192,
    6,
)
APIS = {api.name: api for api in (CHAT, MESSAGES, RESPONSES)}


class Target:
    """Where a phase sends its requests; `pid`: the proxy or gateway process in front of the worker,
    whose CPU `Load.sides` measures (None: the worker itself, direct); `api`: the client API
    (direct and the bare proxy speak chat only)."""

    def __init__(
        self, base: str, api_key: str | None = None, pid: int | None = None, api: Api = CHAT
    ) -> None:
        self.api = api
        self.url = base + api.path
        self.headers = api.headers(api_key)
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
        api = target.api
        body = api.body(body)
        if expect_events is not None:
            expect_events += api.extra_events
        latencies = result.latencies_s
        ttfts = result.ttft_s
        perf = time.perf_counter
        tail_len = max(1024 if count_tokens else 32, api.tail_len)
        first_token_at, ended = api.first_token_at, api.ended
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
                        if first_token_at(head):
                            first = perf() - t0
                    events += chunk.count(b"\n\n") + (1 if last_nl and chunk[:1] == b"\n" else 0)
                    last_nl = chunk[-1:] == b"\n"
                    tail = (tail + chunk)[-tail_len:]
            end = perf()
            if first is None or not ended(tail):
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
