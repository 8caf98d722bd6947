"""Chaos fixtures: a Redis of the test's own (persistent, so it can be killed and come back), and
gateways as real `python -m gateway serve` processes, stopped with SIGTERM like a Kubernetes pod."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.cli import AdminClient
from gateway.dev.embedded_redis import EmbeddedRedis
from tests.conftest import FAKE_MODEL, SessionLog
from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
REDIS_TIMEOUT_S = 1.0


@dataclass
class GatewayProcess:
    url: str
    admin: AdminClient
    process: subprocess.Popen[bytes]
    log_path: Path
    secrets: list[str]  # the session's: no log line of any process may contain one

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM, as Kubernetes stops a pod: the gateway drains, the lifespan's shutdown runs,
        and it exits 0."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        status = self.process.wait(timeout=30)
        assert status == 0, self.log()
        assert "Application shutdown complete" in self.log(), self.log()

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=5) as reply:  # noqa: S310
            for line in reply.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        raise AssertionError(f"{name} is not on /metrics")

    def usage(self, team: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.admin.call("GET", "/admin/v1/usage", team=team)["data"]
        return rows

    def new_key(self, team: str, **fields: Any) -> dict[str, Any]:
        key: dict[str, Any] = self.admin.call("POST", "/admin/v1/keys", {"team": team, **fields})
        self.secrets.append(key["key"])
        return key


StartGateway = Callable[..., GatewayProcess]


@pytest.fixture
def start_gateway(fake_worker: str, tmp_path: Path, session_log: SessionLog) -> Iterator[StartGateway]:
    """Gateway processes; their log lines join the session's, which is checked for secrets."""
    table = tmp_path / "models.yaml"
    table.write_text(f"models:\n  - name: {FAKE_MODEL}\n    endpoints: [{{url: '{fake_worker}'}}]\n")
    started: list[GatewayProcess] = []

    def start(redis_url: str, *, models: str | None = None, **settings: str) -> GatewayProcess:
        """`models`: the model table's YAML, instead of one model in front of the fake worker."""
        port = free_port()
        token = f"adm-faults-{port}-0123456789abcdef0123456789abcdef"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICEGATE_")}
        env.update(
            SLUICEGATE_REDIS_URL=redis_url,
            SLUICEGATE_CONFIG=str(table if models is None else _written(tmp_path, models)),
            SLUICEGATE_ADMIN_TOKEN=token,
            SLUICEGATE_HOST="127.0.0.1",
            SLUICEGATE_PORT=str(port),
            SLUICEGATE_REDIS_TIMEOUT=str(REDIS_TIMEOUT_S),
            # Keys stay cached through the whole fault: auth alone must not need Redis.
            SLUICEGATE_KEY_CACHE_TTL="300",
            SLUICEGATE_SPOOL_PATH=str(tmp_path / "usage.spool"),
            # No Service to leave: a test that stops a gateway wants it stopped now.
            SLUICEGATE_SHUTDOWN_DELAY="0",
        )
        env.update(settings)
        log_path = tmp_path / f"gateway-{len(started)}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "gateway", "serve"], cwd=ROOT, env=env, stdout=log, stderr=log
            )
        base = f"http://127.0.0.1:{port}"
        gw = GatewayProcess(base, AdminClient(base, token), process, log_path, session_log.secrets)
        session_log.secrets.append(token)
        started.append(gw)
        deadline = time.monotonic() + 30
        while not _answers(f"{gw.url}/healthz"):
            assert gw.alive(), f"the gateway exited at start:\n{gw.log()}"
            assert time.monotonic() < deadline, f"the gateway did not start:\n{gw.log()}"
            time.sleep(0.05)
        return gw

    yield start
    for gw in started:
        if gw.alive():
            gw.process.kill()
            gw.process.wait(timeout=10)
        session_log.lines.extend(gw.log().splitlines())


def _written(folder: Path, text: str) -> Path:
    path = folder / f"models-{abs(hash(text))}.yaml"
    path.write_text(text)
    return path


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):  # noqa: S310
            return True
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """Restart it with `.stop()` and `.start()`: same port, same data."""
    data = tmp_path / "redis"
    data.mkdir()
    server = EmbeddedRedis(data_dir=str(data)).start()
    try:
        yield server
    finally:
        with contextlib.suppress(RuntimeError, ProcessLookupError):
            os.kill(server.pid, signal.SIGCONT)  # a test that failed mid-pause must not leave it stopped
        server.stop()
