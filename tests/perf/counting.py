"""What a request does, counted instead of timed: Python calls into `gateway/` code and the Redis
commands the gateway sends.

Calls are counted with `sys.setprofile` in the gateway's own server thread (the callback is
installed by `Counted`, the outermost ASGI app, on the first request it sees), and only in a
request's context: `Counted` gives each API request a counter in a context variable, which the
tasks and callbacks the request starts inherit, so timers and background tasks started at startup
(probes, the key cache's revocation watch, the usage flusher) are not counted. The fair share's
batched updates run in a context of their own (gateway/routing/vtc.py), so a request never counts
them, however long they outlive it on a busy machine. A coroutine resumed after
an await also reports "call", at a RESUME instruction whose argument says why (0: the function's
start; 1-3: after a yield or an await); only starts are counted, so the count does not depend on
how often a read had to wait.
"""

from __future__ import annotations

import contextlib
import contextvars
import dis
import hashlib
import os
import sys
import threading
import types
from collections import Counter
from pathlib import Path
from typing import Any

import redis

GATEWAY_DIR = str(Path(__file__).resolve().parents[2] / "gateway") + os.sep
_RESUME = dis.opmap["RESUME"]
# The calls of the request whose context this is (a task the request starts carries it along).
_REQUEST: contextvars.ContextVar[Counter[types.CodeType] | None] = contextvars.ContextVar(
    "counted_request", default=None
)


def _start_offset(code: types.CodeType) -> int:
    """Where a function's body starts: its RESUME with argument 0."""
    raw = code.co_code
    for at in range(0, len(raw), 2):
        if raw[at] == _RESUME and raw[at + 1] == 0:
            return at
    return -1


class Counted:
    """The gateway app inside an ASGI wrapper that counts its requests' `gateway/` calls."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self._lock = threading.Lock()
        self.counting = False
        self.requests: list[Counter[types.CodeType]] = []  # per request, while counting
        self._starts: dict[types.CodeType, int] = {}
        self.finished = 0  # API requests whose ASGI call returned (after the access log)

    def _profile(self, frame: types.FrameType, event: str, _arg: object) -> None:
        if event != "call":
            return
        code = frame.f_code
        calls = _REQUEST.get()
        if calls is None or not code.co_filename.startswith(GATEWAY_DIR):
            return
        start = self._starts.get(code)
        if start is None:
            start = self._starts[code] = _start_offset(code)
        if frame.f_lasti == start:  # a start, not a resumption
            calls[code] += 1

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self._app(scope, receive, send)
            return
        if sys.getprofile() is None:
            sys.setprofile(self._profile)  # this thread: the gateway's event loop
        calls: Counter[types.CodeType] = Counter()
        if self.counting:
            self.requests.append(calls)
        _REQUEST.set(calls)
        try:
            await self._app(scope, receive, send)
        finally:
            with self._lock:
                self.finished += 1

    def take(self) -> list[Counter[types.CodeType]]:
        """The calls of each request counted since the last take."""
        requests, self.requests = self.requests, []
        return requests


def describe(calls: Counter[types.CodeType], top: int = 25) -> str:
    lines = []
    for code, n in calls.most_common(top):
        where = code.co_filename.removeprefix(GATEWAY_DIR)
        lines.append(f"{n:6d}  {where}:{code.co_firstlineno} {code.co_qualname}")
    return "\n".join(lines)


def _script_names() -> dict[str, str]:
    """sha1 -> script name, for every Lua script the gateway registers (redis-py's own sha)."""
    names = {}
    for path in (Path(GATEWAY_DIR) / "redis" / "lua").glob("*.lua"):
        names[hashlib.sha1(path.read_bytes()).hexdigest()] = path.stem  # noqa: S324 -- Redis's
    return names


class CommandLog:
    """Every command the gateway sends to Redis, read from MONITOR in a thread of its own.

    INFO commandstats counts commands by name only, so the scripts (admission, settlement, fair
    share) would be one `evalsha` figure; MONITOR names each script by its sha. Commands run inside
    a script are left out (they are no round trip), and so are this log's own. `mark()` returns
    once everything Redis ran before it has been read, so a phase ends exactly."""

    def __init__(self, url: str) -> None:
        self._monitor_client = redis.Redis.from_url(url)
        self._client = redis.Redis.from_url(url)
        self._scripts = _script_names()
        self._lock = threading.Lock()
        self._commands: Counter[str] = Counter()
        self._marks: set[str] = set()
        self._seen = threading.Condition(self._lock)
        self._monitor = self._monitor_client.monitor()  # type: ignore[no-untyped-call]
        self._monitor.__enter__()
        self._thread = threading.Thread(target=self._read, name="redis-monitor", daemon=True)
        self._thread.start()

    def _name(self, words: list[str]) -> str:
        name = words[0].lower()
        if name in ("evalsha", "eval") and len(words) > 1:
            return f"{name} {self._scripts.get(words[1].lower(), words[1][:8])}"
        if name in ("script", "client", "config") and len(words) > 1:
            return f"{name} {words[1].lower()}"
        return name

    def _read(self) -> None:
        with contextlib.suppress(redis.ConnectionError, ValueError, OSError):
            for entry in self._monitor.listen():
                if entry.get("client_type") == "lua":
                    continue
                words = str(entry["command"]).split()
                if not words:
                    continue
                if words[0].lower() == "echo" and len(words) == 2:
                    with self._seen:
                        self._marks.add(words[1])
                        self._seen.notify_all()
                    continue
                with self._lock:
                    self._commands[self._name(words)] += 1

    def load_scripts(self) -> None:
        """Loads every gateway script into Redis, as a gateway's first call of each would."""
        for path in (Path(GATEWAY_DIR) / "redis" / "lua").glob("*.lua"):
            self._client.script_load(path.read_text(encoding="utf-8"))

    def mark(self) -> Counter[str]:
        """The commands counted since the last mark."""
        token = "budget-mark-" + os.urandom(6).hex()
        self._client.echo(token)
        with self._seen:
            if not self._seen.wait_for(lambda: token in self._marks, timeout=10):
                raise AssertionError("MONITOR did not show the mark within 10 s")
            commands, self._commands = self._commands, Counter()
        return commands

    def close(self) -> None:
        with contextlib.suppress(redis.RedisError, OSError):
            self._monitor_client.connection_pool.disconnect()  # ends listen() in the thread
        self._thread.join(timeout=5)
        self._client.close()
        self._monitor_client.close()
