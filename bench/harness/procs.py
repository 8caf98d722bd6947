"""Child processes: starting (mock workers, servers, the Redis + gateway stack), stopping, the watchdog.

Every child is started in its own session with PR_SET_PDEATHSIG, stopped (TERM, then KILL) when the
run ends, fails, or gets Ctrl-C/SIGTERM, and a SIGALRM watchdog kills everything if the run overruns.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from gateway.dev.embedded_redis import EmbeddedRedis
from harness.cpu import REPO, find_pids, pin

PR_SET_PDEATHSIG = 1
T = TypeVar("T")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _child_setup(cpus: set[int] | None, nofile: int | None = None) -> Callable[[], None]:
    """Runs in the child between fork and exec: pin it, let it die with this process, and give it
    `nofile` as its soft descriptor limit (the child's own, never this process's)."""

    def setup() -> None:
        if nofile is not None:
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))
        if cpus:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, cpus)
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

    return setup


class Children:
    """Every child process this run started, stopped in reverse order (TERM, then KILL); the phase
    the run is in, for progress lines and the watchdog's message."""

    def __init__(self) -> None:
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.redis_pids: list[int] = []  # owned by EmbeddedRedis; only the watchdog touches them
        self.temp_dirs: list[str] = []
        self.on_kill: list[Callable[[], None]] = []  # the watchdog's extra clean-ups
        self.phase = "start-up"
        self.started = time.monotonic()
        self.hard_limit_s = 0

    def add(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        self.procs.append((name, proc))

    def step(self, text: str) -> None:
        self.phase = text
        elapsed = time.monotonic() - self.started
        print(f"  .. [{elapsed:5.1f} s] {text}", file=sys.stderr, flush=True)

    def arm(self, seconds: int) -> None:
        """(Re)starts the watchdog: everything is killed `seconds` from now."""
        self.hard_limit_s = seconds
        signal.alarm(seconds)

    def stop_all(self) -> None:
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
        deadline = time.monotonic() + 5
        for _, proc in reversed(self.procs):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        for _, proc in self.procs:
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        self.procs.clear()

    def kill_now(self) -> None:
        """The watchdog's exit: kill everything at once, Redis included, and remove temp dirs."""
        for _, proc in self.procs:
            with contextlib.suppress(Exception):
                proc.kill()
        for hook in self.on_kill:
            with contextlib.suppress(Exception):
                hook()
        for pid in self.redis_pids:
            with contextlib.suppress(OSError):
                workdir = os.readlink(f"/proc/{pid}/cwd")
                if Path(workdir).name.startswith("sluicegate-redis-"):
                    self.temp_dirs.append(workdir)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        for path in self.temp_dirs:
            shutil.rmtree(path, ignore_errors=True)


def guarded(children: Children, hard_limit_s: int, work: Callable[[], T]) -> T | None:
    """Runs `work` under the watchdog, with SIGTERM and Ctrl-C stopping every child; None when
    interrupted. The children are stopped however `work` ends."""

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        print(
            f"\nwatchdog: the benchmark ran past {children.hard_limit_s} s (in phase: {children.phase}); "
            "killing everything",
            file=sys.stderr,
        )
        children.kill_now()
        os._exit(3)

    def on_term(signum: int, frame: FrameType | None) -> None:
        # Not KeyboardInterrupt: raised while uvloop runs a protocol callback, it is logged as a
        # transport error and swallowed, and the run goes on.
        print("\ninterrupted; child processes stopped", file=sys.stderr)
        children.kill_now()
        os._exit(128 + signum)

    signal.signal(signal.SIGINT, on_term)  # even when started in the background
    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_term)
    children.arm(hard_limit_s)
    try:
        return work()
    except KeyboardInterrupt:
        print("\ninterrupted; child processes stopped", file=sys.stderr)
        return None
    finally:
        signal.alarm(0)
        children.stop_all()


def start_announcing(
    children: Children, name: str, argv: list[str], cpus: set[int] | None, *, timeout_s: float = 10.0
) -> tuple[int, subprocess.Popen[bytes]]:
    """Starts a child that prints `READY <port>` once listening (bench/mock_worker.py, bare_proxy.py)."""
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        preexec_fn=_child_setup(cpus),
        start_new_session=True,
    )
    children.add(name, proc)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    line = proc.stdout.readline().decode() if ready else ""
    if not line.startswith("READY "):
        raise RuntimeError(f"{name} did not start (said {line!r})")
    return int(line.split()[1]), proc


BARE_PROXY = Path(__file__).resolve().parents[1] / "bare_proxy.py"


def start_bare_proxy(
    children: Children,
    name: str,
    upstream: str,
    cpus: set[int] | None,
    *,
    wrap: tuple[str, ...] = (),
    timeout_s: float = 10.0,
    redis_url: str | None = None,
) -> tuple[int, subprocess.Popen[bytes]]:
    """bench/bare_proxy.py in front of `upstream` (the gateway's uvicorn settings), pinned to `cpus`;
    `wrap` runs it under another program (valgrind), which then needs a longer `timeout_s` to start;
    `redis_url` makes it take a Redis round trip before and after each request (its `--redis-url`)."""
    argv = [*wrap, sys.executable, str(BARE_PROXY), "--port", "0", "--upstream", upstream]
    argv += ["--redis-url", redis_url] if redis_url else []
    port, proc = start_announcing(children, name, argv, cpus, timeout_s=timeout_s)
    pin(proc.pid, cpus)  # any thread started during boot, too
    return port, proc


def start_server(
    children: Children,
    name: str,
    argv: list[str],
    ready_url: str,
    log_path: Path,
    *,
    cpus: set[int] | None = None,
    env: dict[str, str] | None = None,
    cwd: str | Path = REPO,
    timeout_s: float = 20.0,
    nofile: int | None = None,
) -> subprocess.Popen[bytes]:
    """Starts an HTTP server logging to `log_path` and waits until `ready_url` answers 200."""
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            preexec_fn=_child_setup(cpus, nofile),
            start_new_session=True,
        )
    children.add(name, proc)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited at start:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(ready_url, timeout=1) as response:  # noqa: S310 -- loopback
                if response.status == 200:
                    return proc
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{name} did not become ready:\n{log_path.read_text()[-3000:]}")


def http_json(method: str, url: str, token: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 -- loopback http
    request.add_header("content-type", "application/json")
    request.add_header("authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        return json.loads(response.read())


@dataclass
class Stack:
    gateway_pid: int
    base: str  # http://127.0.0.1:<gateway port>
    api_key: str  # a key of team "bench" with rpm 1,000,000,000
    limited_key: str  # a key where every kind of limit applies on key and team, none ever binding
    redis_url: str
    redis_pids: list[int]
    tmp: Path  # removed when the stack stops


@contextlib.contextmanager
def gateway_stack(
    children: Children,
    models: dict[str, str],
    gw_cpus: set[int] | None,
    rest_cpus: set[int] | None,
    *,
    wrap: tuple[str, ...] = (),
    timeout_s: float = 20.0,
    env: dict[str, str] | None = None,
    model_yaml: str = "",
    nofile: int | None = None,
) -> Iterator[Stack]:
    """A throwaway Redis (pinned to `rest_cpus`) and `python -m gateway serve` (pinned to `gw_cpus`,
    log level warning) routing each model name to one worker URL, with a team and a key whose rpm
    never limits, so every request takes the full path (auth, rate limit, routing, metering).
    `wrap` runs the gateway under another program (valgrind; its pid is the gateway's), which
    then needs a longer `timeout_s` to start. `env` adds settings, `model_yaml` adds lines to every
    model entry (indented by four spaces), `nofile` is the gateway's soft descriptor limit."""
    with EmbeddedRedis() as redis, tempfile.TemporaryDirectory(prefix="sluicegate-bench-") as tmp:
        redis_pids = find_pids(parent=os.getpid(), comm="redis-server")
        children.redis_pids += redis_pids
        children.temp_dirs.append(tmp)
        for pid in redis_pids:
            pin(pid, rest_cpus)
        config = Path(tmp) / "models.yaml"
        config.write_text(
            "models:\n"
            + "".join(
                f"  - name: {name}\n    endpoints:\n      - url: {url}\n{model_yaml}"
                for name, url in models.items()
            )
        )
        admin_token = secrets.token_urlsafe(24)
        port = free_port()
        gateway_env = {
            **os.environ,
            "SLUICEGATE_REDIS_URL": redis.url,
            "SLUICEGATE_CONFIG": str(config),
            "SLUICEGATE_ADMIN_TOKEN": admin_token,
            "SLUICEGATE_HOST": "127.0.0.1",
            "SLUICEGATE_PORT": str(port),
            "SLUICEGATE_LOG_LEVEL": "warning",
            # Nothing routes to it through a Service: no reason to keep serving after SIGTERM.
            "SLUICEGATE_SHUTDOWN_DELAY": "0",
            **(env or {}),
        }
        # Another checkout's gateway (say, main before a change) against this run's baselines.
        other = os.environ.get("SLUICEGATE_BENCH_GATEWAY_SRC")
        if other:
            # `python -m` puts its working directory first on sys.path: it must be the other
            # checkout, or this one's gateway is what runs.
            gateway_env["PYTHONPATH"] = os.pathsep.join(filter(None, (other, gateway_env.get("PYTHONPATH"))))
        base = f"http://127.0.0.1:{port}"
        log_path = Path(tmp) / "gateway.log"
        argv = [*wrap, sys.executable, "-m", "gateway", "serve"]
        gateway = start_server(
            children,
            "gateway",
            argv,
            base + "/readyz",
            log_path,
            cpus=gw_cpus,
            env=gateway_env,
            cwd=other or REPO,
            timeout_s=timeout_s,
            nofile=nofile,
        )
        pin(gateway.pid, gw_cpus)  # any thread started during boot, too
        http_json("POST", base + "/admin/v1/teams", admin_token, {"name": "bench"})
        key = http_json("POST", base + "/admin/v1/keys", admin_token, {"team": "bench", "rpm": 1_000_000_000})
        never = 1_000_000_000  # high enough never to refuse: every limit is checked and charged
        rates = {"rpm": never, "tpm": never, "max_concurrency": 100_000}
        budgets = {"daily_tokens": never, "monthly_tokens": never}
        http_json(
            "POST", base + "/admin/v1/teams", admin_token, {"name": "bench-limited", **rates, **budgets}
        )
        limited = http_json("POST", base + "/admin/v1/keys", admin_token, {"team": "bench-limited", **rates})
        try:
            yield Stack(gateway.pid, base, key["key"], limited["key"], redis.url, redis_pids, Path(tmp))
        except Exception:
            print("gateway log (tail):\n" + log_path.read_text(errors="replace")[-3000:], file=sys.stderr)
            raise
        finally:
            children.stop_all()
