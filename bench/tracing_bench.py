"""The gateway's CPU per request with OpenTelemetry tracing off, on at the default sampler, and on
with every request sampled, in one run.

Starts a throwaway Redis, the mock worker (bench/mock_worker.py), a local OTLP/HTTP receiver (a
thread of this process: it reads each export and answers 200, counting the bytes) and three
gateways (`python -m gateway serve`): one with no OTEL_* variables (tracing off), one with only
OTEL_EXPORTER_OTLP_ENDPOINT (the documented default sampler: parent-based, by trace id ratio, at
SLUICEGATE_TRACE_SAMPLE_RATIO's default) and one with OTEL_TRACES_SAMPLER=always_on. They serve
the same streamed chat requests at the same concurrency, in rounds whose order rotates (off,
default, all; default, all, off; ...) so a drift of the machine hits each alike; the CPU each
gateway process used (utime + stime from /proc) is divided by the requests it served. Tracing's
export thread is part of the gateway process, so its cost is counted. A timing: on a busy machine
prefer `bench/instructions_bench.py --tracing`, which counts instructions. About 1 to 2 minutes.

    .venv/bin/python bench/tracing_bench.py                 # 3 rounds of 4000 requests per mode
    .venv/bin/python bench/tracing_bench.py --requests 300 --rounds 1   # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import aiohttp

from gateway.dev.embedded_redis import EmbeddedRedis

REPO = Path(__file__).resolve().parents[1]
MODEL = "bench-model"
_TICKS = os.sysconf("SC_CLK_TCK")
HARD_LIMIT_S = 300  # the whole run; a hang anywhere ends it


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process, all its threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


@dataclass
class Receiver:
    exports: int = 0
    bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextlib.contextmanager
def otlp_receiver() -> Iterator[tuple[str, Receiver]]:
    received = Receiver()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            with received.lock:
                received.exports += 1
                received.bytes += len(body)
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def _ready_port(process: subprocess.Popen[str]) -> int:
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("READY "):
        raise RuntimeError(f"the mock worker did not start: {line!r}")
    return int(line.split()[1])


def _wait_healthy(url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("a gateway exited at start")
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"{url}/healthz", timeout=2) as reply,  # noqa: S310 -- loopback
        ):
            if reply.status == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not become healthy")


def _admin(url: str, token: str, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(  # noqa: S310 -- loopback
        url + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310
        return json.loads(reply.read())


@dataclass
class Gateway:
    name: str
    process: subprocess.Popen[str]
    url: str
    key: str
    cpu_s: float = 0.0
    requests: int = 0
    failures: int = 0


def start_gateway(name: str, redis_url: str, worker: str, tmp: Path, otel: dict[str, str]) -> Gateway:
    table = tmp / f"{name}.yaml"
    table.write_text(f"models:\n  - name: {MODEL}\n    endpoints: [{{url: {worker}}}]\n")
    port = free_port()
    token = secrets.token_hex(24)
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env.update(
        SLUICEGATE_REDIS_URL=redis_url,
        SLUICEGATE_CONFIG=str(table),
        SLUICEGATE_ADMIN_TOKEN=token,
        SLUICEGATE_HOST="127.0.0.1",
        SLUICEGATE_PORT=str(port),
        SLUICEGATE_LOG_LEVEL="warning",  # access lines cost the same either way: keep them out
        SLUICEGATE_SHUTDOWN_DELAY="0",
        SLUICEGATE_SPOOL_PATH=str(tmp / f"{name}.spool"),
        **otel,
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve"], cwd=REPO, env=env, stdout=subprocess.DEVNULL, text=True
    )
    url = f"http://127.0.0.1:{port}"
    _wait_healthy(url, process)
    _admin(url, token, "/admin/v1/teams", {"name": f"bench-{name}"})  # one Redis: a team each
    key = _admin(url, token, "/admin/v1/keys", {"team": f"bench-{name}"})["key"]
    return Gateway(name, process, url, key)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def load(gateway: Gateway, requests: int, concurrency: int) -> None:
    """`requests` streamed chat requests, `concurrency` at a time, each read to its end."""
    body = json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 16}
    ).encode()
    headers = {"authorization": f"Bearer {gateway.key}", "content-type": "application/json"}
    left = requests
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def client() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                async with session.post(
                    f"{gateway.url}/v1/chat/completions", data=body, headers=headers
                ) as r:
                    await r.read()
                    if r.status != 200:
                        gateway.failures += 1

        await asyncio.gather(*(client() for _ in range(concurrency)))


def measure(gateway: Gateway, requests: int, concurrency: int) -> None:
    before = cpu_seconds(gateway.process.pid)
    asyncio.run(load(gateway, requests, concurrency))
    gateway.cpu_s += cpu_seconds(gateway.process.pid) - before
    gateway.requests += requests


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=4000, help="requests per mode per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    signal.signal(signal.SIGALRM, lambda *_: sys.exit("tracing bench: over its hard time limit"))
    signal.alarm(HARD_LIMIT_S)
    started = time.monotonic()
    children: list[subprocess.Popen[str]] = []
    with (
        tempfile.TemporaryDirectory() as tmp_dir,
        EmbeddedRedis() as redis,
        otlp_receiver() as (receiver_url, received),
    ):
        tmp = Path(tmp_dir)
        try:
            worker = subprocess.Popen(
                [sys.executable, str(REPO / "bench" / "mock_worker.py"), "--port", "0", "--tokens", "16"],
                stdout=subprocess.PIPE,
                text=True,
            )
            children.append(worker)
            worker_url = f"http://127.0.0.1:{_ready_port(worker)}"
            off = start_gateway("off", redis.url, worker_url, tmp, {})
            children.append(off.process)
            default = start_gateway(
                "default", redis.url, worker_url, tmp, {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver_url}
            )
            children.append(default.process)
            on = start_gateway(
                "all",
                redis.url,
                worker_url,
                tmp,
                {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver_url, "OTEL_TRACES_SAMPLER": "always_on"},
            )
            children.append(on.process)
            modes = [off, default, on]
            for gateway in modes:  # warm-up: connections, caches, the first export
                asyncio.run(load(gateway, max(args.requests // 5, 50), args.concurrency))
            for round_ in range(args.rounds):
                shift = round_ % len(modes)
                for gateway in modes[shift:] + modes[:shift]:
                    measure(gateway, args.requests, args.concurrency)
            exports_before_stop = received.exports
        finally:
            for child in reversed(children):
                child.send_signal(signal.SIGTERM)
            for child in reversed(children):
                try:
                    child.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
                if child.stdout is not None:
                    child.stdout.close()
    print(
        f"tracing bench: {args.rounds} rounds x {args.requests} streamed chat requests per mode, "
        f"concurrency {args.concurrency}, {os.cpu_count()} CPUs, {time.monotonic() - started:.0f} s"
    )
    off_us = off.cpu_s / off.requests * 1e6
    for gateway in modes:
        per_request_us = gateway.cpu_s / gateway.requests * 1e6
        print(
            f"  tracing {gateway.name:<7}  CPU per request {per_request_us:7.1f} us "
            f"({per_request_us - off_us:+6.1f} us, {(per_request_us / off_us - 1) * 100:+5.1f}%)  "
            f"({gateway.cpu_s:.2f} s for {gateway.requests} requests, {gateway.failures} failed)"
        )
    print(
        f"  receiver: {received.exports} OTLP exports ({exports_before_stop} before shutdown), "
        f"{received.bytes / 1024:.0f} KiB"
    )
    return 0 if not any(gateway.failures for gateway in modes) else 1


if __name__ == "__main__":
    sys.exit(main())
