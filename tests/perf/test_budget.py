"""The per-request budget, counted: Python calls into `gateway/` and Redis commands per chat
request, for each kind of request, against the numbers recorded in tests/perf/budget.json.

Nothing here is timed. Calls are counted in the requests' own context (tests/perf/counting.py);
Redis commands are read from MONITOR over a fixed number of sequential requests, each script by
name. What the request path sends itself (admission, the usage record that settles) is counted
exactly; what the gateway batches in the background (fair-share updates, the SCRIPT EXISTS
redis-py sends before each usage batch) is bounded by its worst case, one batch per request. A
count past its record (plus a little headroom for dependency releases) fails;
`SLUICEGATE_BUDGET_RECORD=1` writes lower counts back, never higher ones.

A kept-alive worker connection's own callbacks (`data_received`, `on_body`: two per event of a
stream) run in the context of the request that opened it, so they count to that request, not to
the ones that use the connection later: the stream's count holds the relay's calls per event
(the read, the SSE split, the worker protocol's and the client API's reading), not the socket's.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.app import create_app
from gateway.cli import AdminClient
from gateway.config import Settings
from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.routing.vtc import HEARTBEAT_S
from tests import http
from tests.conftest import FAKE_MODEL, SessionLog, default_table
from tests.perf.counting import CommandLog, Counted, describe
from tests.servers import listening_socket, run_uvicorn
from tests.waiting import wait_until
from workers.fake.app import create_app as create_fake_worker

BUDGET_PATH = Path(__file__).with_name("budget.json")
REQUESTS = 20
STREAM_TOKENS = 16
STREAM_TOKEN_DELAY_MS = 2
# Room for a dependency release that adds a call here and there; a real change shows more.
HEADROOM = 1.03
NEVER = 1_000_000_000  # limits high enough never to refuse: each is checked and charged
EVERY_LIMIT = {"rpm": NEVER, "tpm": NEVER, "max_concurrency": 100_000}
BUDGETS = {"daily_tokens": NEVER, "monthly_tokens": NEVER}
# Sent in batches behind the requests, so not a fixed number per request: each is bounded by its
# worst case instead. Fair share: a charge at dispatch and a correction at settlement, each in a
# batch of its own at worst, plus a heartbeat a second (HEARTBEAT_S) while teams are active; the
# SCRIPT EXISTS redis-py sends before each usage batch; HELLO when a pooled connection is opened;
# the health check's PING (gateway/redis/health.py, every PING_INTERVAL_S whatever the traffic),
# which lands in a window of requests that lasted longer than that on a busy machine.
BATCHED = {"evalsha vtc": 2.0, "script exists": 1.0, "hello": 1.0, "ping": 1.0}


@dataclass
class Stack:
    url: str
    counted: Counted
    admin: AdminClient
    commands: CommandLog
    secrets: list[str]
    sent: int = 0  # API requests sent so far


@pytest.fixture(scope="module")
def paced_worker() -> Iterator[str]:
    """The fake worker on uvloop, as engines serve (vLLM's uvicorn): there a paced stream's events
    leave one write each on a kept-alive connection too, where uvicorn on asyncio's own loop sends
    a stream after the first on a connection in one piece, at its end."""
    with run_uvicorn(create_fake_worker([FAKE_MODEL]), loop="uvloop") as url:
        yield url


@pytest.fixture(scope="module")
def own_redis() -> Iterator[EmbeddedRedis]:
    """A Redis of the budget's own: the session's holds what earlier tests left (a pool's
    fair-share heartbeats of teams that waited there moments ago), which would make this
    gateway's pool contended and its requests charge fair share, a count that depends on which
    tests ran just before and how long they took."""
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture(scope="module")
def stack(own_redis: EmbeddedRedis, paced_worker: str, session_log: SessionLog) -> Iterator[Stack]:
    redis_server = own_redis
    admin_token = "adm-" + secrets.token_urlsafe(32)
    session_log.secrets.append(admin_token)
    sock = listening_socket()
    settings = Settings(
        redis_url=redis_server.url,
        admin_token=admin_token,
        host="127.0.0.1",
        port=sock.getsockname()[1],
        spool_path=os.path.join(tempfile.gettempdir(), f"sluicegate-test-{secrets.token_hex(6)}.spool"),
        # Keys and teams are read once: a cache entry that expired between two requests would
        # add a look-up to one of them.
        key_cache_ttl_s=3600.0,
    )
    counted = Counted(create_app(settings, default_table(paced_worker)))
    with run_uvicorn(counted, sock=sock, settings=settings) as url:
        log = CommandLog(redis_server.url)
        log.load_scripts()  # a script first called while counting would add its SCRIPT LOAD
        try:
            yield Stack(url, counted, AdminClient(url, admin_token), log, session_log.secrets)
        finally:
            log.close()


def _key(stack: Stack, team_limits: dict[str, int], key_limits: dict[str, int]) -> str:
    team = "budget-" + secrets.token_hex(4)
    stack.admin.call("POST", "/admin/v1/teams", {"name": team, **team_limits})
    key: dict[str, Any] = stack.admin.call("POST", "/admin/v1/keys", {"team": team, **key_limits})
    secret: str = key["key"]
    stack.secrets.append(secret)  # the session checks that no log line holds it
    return secret


def _metering_idle(stack: Stack) -> bool:
    """Every usage record submitted so far is in Redis (the meter's pending gauge is back at 0)."""
    text = http.get(stack.url + "/metrics", timeout=10).body.decode()
    return "\nsluicegate_metering_pending 0.0\n" in text


@dataclass
class Measured:
    calls: int  # Python calls into gateway/ of the median request
    spread: tuple[int, int]  # the fewest and most of one request
    commands: dict[str, float]  # Redis commands per request, by name (a script by its name)
    top: str


def _send(stack: Stack, key: str, n: int, *, stream: bool, status: int) -> None:
    """n requests one after another, each answered with `status`; returns when all are done."""
    body = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "count me"}], "stream": stream}
    headers = {"x-fake-tokens": str(STREAM_TOKENS)}
    if stream:
        # Paced like an engine's tokens: each event reaches the gateway on its own, as on a real
        # worker. Unpaced, how many events one read takes depends on how fast the gateway keeps
        # up (a busy machine batches more, and counts fewer calls); paced, every stream counts
        # its worst case, one relay batch per event.
        headers["x-fake-token-delay-ms"] = str(STREAM_TOKEN_DELAY_MS)
    for _ in range(n):
        reply = http.post(stack.url + "/v1/chat/completions", body, key=key, headers=headers)
        assert reply.status == status, reply.body
        if stream and status == 200:
            assert reply.body.rstrip().endswith(b"data: [DONE]"), reply.body[-200:]
    stack.sent += n
    # The client has its answer before the request is done (settlement, the access log).
    wait_until(lambda: stack.counted.finished == stack.sent, 10, "the requests finished")
    wait_until(lambda: _metering_idle(stack), 10, "usage records written")


def _measure(stack: Stack, key: str, *, stream: bool, status: int) -> Measured:
    _send(stack, key, 2, stream=stream, status=status)  # first look-ups, pooled connections
    stack.commands.mark()
    stack.counted.counting = True
    started = time.monotonic()
    try:
        _send(stack, key, REQUESTS, stream=stream, status=status)
    finally:
        stack.counted.counting = False
    commands = stack.commands.mark()
    # Heartbeats go by the clock: a bound, never a measurement of speed.
    commands["evalsha vtc"] -= int((time.monotonic() - started) / HEARTBEAT_S) + 1
    commands = +commands  # drops what is zero or below
    requests = stack.counted.take()
    assert len(requests) == REQUESTS
    totals = [sum(calls.values()) for calls in requests]
    median = sorted(range(REQUESTS), key=totals.__getitem__)[REQUESTS // 2]
    return Measured(
        calls=totals[median],
        commands={name: n / REQUESTS for name, n in sorted(commands.items())},
        spread=(min(totals), max(totals)),
        top=describe(requests[median]),
    )


KINDS: dict[str, tuple[dict[str, int], dict[str, int], bool, int]] = {
    # name: team limits, key limits, stream, status
    "unlimited key": ({}, {}, False, 200),
    "every limit": ({**EVERY_LIMIT, **BUDGETS}, {**EVERY_LIMIT, **BUDGETS}, False, 200),
    "every limit, stream": ({**EVERY_LIMIT, **BUDGETS}, {**EVERY_LIMIT, **BUDGETS}, True, 200),
    "refused": ({}, {"rpm": 1}, False, 429),
}


def _recorded() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(BUDGET_PATH.read_text(encoding="utf-8"))
    return loaded


@pytest.mark.parametrize("kind", list(KINDS))
def test_request_budget(stack: Stack, kind: str) -> None:
    team_limits, key_limits, stream, status = KINDS[kind]
    key = _key(stack, team_limits, key_limits)
    if status == 429:
        _send(stack, key, 1, stream=False, status=200)  # the key's one request a minute
    measured = _measure(stack, key, stream=stream, status=status)
    print(f"\n{kind}: {measured.calls} calls (requests: {measured.spread}); Redis {measured.commands}")
    print(measured.top)
    recorded = _recorded()
    entry = recorded["kinds"].get(kind)
    if os.environ.get("SLUICEGATE_BUDGET_RECORD") == "1":
        _record(recorded, kind, measured)
        return
    assert entry is not None, f"no budget recorded for {kind!r}: run with SLUICEGATE_BUDGET_RECORD=1"
    assert measured.calls <= entry["calls"] * HEADROOM, (
        f"{kind}: {measured.calls} gateway calls per request, the budget is {entry['calls']} "
        f"(+{HEADROOM - 1:.0%}); where they go:\n{measured.top}"
    )
    for name, per_request in measured.commands.items():
        allowed = BATCHED.get(name, entry["redis"].get(name, 0.0))
        assert per_request <= allowed, (
            f"{kind}: {per_request:g} Redis {name!r} per request, the budget is {allowed:g} "
            f"(all sent: {measured.commands})"
        )


def _record(recorded: dict[str, Any], kind: str, measured: Measured) -> None:
    """Lowers (or first sets) the kind's budget; a count that grew is never written."""
    entry = recorded["kinds"].get(kind)
    calls = measured.calls
    exact = {name: n for name, n in measured.commands.items() if name not in BATCHED}
    if entry is not None:
        assert calls <= entry["calls"] * HEADROOM, f"{kind}: {calls} calls grew past {entry['calls']}"
        calls = min(calls, entry["calls"])
        for name, n in exact.items():
            assert n <= entry["redis"].get(name, 0.0), f"{kind}: Redis {name} grew"
        exact = {name: min(n, entry["redis"].get(name, n)) for name, n in exact.items()}
    recorded["kinds"][kind] = {"calls": calls, "redis": exact}
    BUDGET_PATH.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n", encoding="utf-8")
