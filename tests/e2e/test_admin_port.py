"""`sluicegate serve` with SLUICEGATE_ADMIN_PORT, as the chart runs it: the admin API, console and
/metrics answer on the admin listener only, the client APIs on the client listener only, and the
CLI in the same environment reaches the admin listener with no SLUICEGATE_URL."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.dev.embedded_redis import EmbeddedRedis
from tests.conftest import FAKE_MODEL, Gateway
from tests.http import get, post
from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
BODY = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "hi"}]}


@dataclass
class TwoPorts:
    client: str
    admin: str
    token: str
    env: dict[str, str]
    process: subprocess.Popen[bytes]


@pytest.fixture
def served(redis_server: EmbeddedRedis, fake_worker: str, tmp_path: Path) -> Iterator[TwoPorts]:
    config = tmp_path / "models.yaml"
    config.write_text(f"models:\n  - name: {FAKE_MODEL}\n    endpoints:\n      - url: {fake_worker}\n")
    token = "adm-" + secrets.token_hex(16)
    port, admin_port = free_port(), free_port()
    env = {
        **os.environ,
        "SLUICEGATE_REDIS_URL": redis_server.url,
        "SLUICEGATE_CONFIG": str(config),
        "SLUICEGATE_ADMIN_TOKEN": token,
        "SLUICEGATE_SCIM_TOKEN": "scim-" + token,
        "SLUICEGATE_HOST": "127.0.0.1",
        "SLUICEGATE_PORT": str(port),
        "SLUICEGATE_ADMIN_PORT": str(admin_port),
        "SLUICEGATE_LOG_LEVEL": "warning",
        "SLUICEGATE_SHUTDOWN_DELAY": "0",
        "SLUICEGATE_SPOOL_PATH": str(tmp_path / "usage.spool"),
    }
    env.pop("SLUICEGATE_URL", None)
    process = subprocess.Popen([sys.executable, "-m", "gateway", "serve"], env=env, cwd=ROOT)
    client, admin = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
    try:
        deadline = time.monotonic() + 30
        for url in (client, admin):
            while True:
                try:
                    if get(f"{url}/healthz", timeout=1).status == 200:
                        break
                except OSError:
                    pass
                assert process.poll() is None, "sluicegate serve exited at start"
                assert time.monotonic() < deadline, f"{url} did not start"
                time.sleep(0.05)
        yield TwoPorts(client, admin, token, env, process)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_admin_plane_answers_on_its_own_port_only(served: TwoPorts) -> None:
    # The CLI, in the gateway's own environment (a `kubectl exec`), finds the admin listener.
    team = "ap-" + secrets.token_hex(4)
    assert _cli(served.env, "teams", "create", team).returncode == 0
    made = _cli(served.env, "keys", "create", "--team", team, "--json")
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)["key"]

    # Client APIs: on the client port; a 404 in the OpenAI envelope on the admin port.
    assert post(f"{served.client}/v1/chat/completions", BODY, key=key).status == 200
    on_admin = post(f"{served.admin}/v1/chat/completions", BODY, key=key)
    assert on_admin.status == 404
    assert "/admin/v1/teams" in on_admin.json()["error"]["message"]
    assert "POST /v1/chat/completions," not in on_admin.json()["error"]["message"].split("serves:")[1]

    # Admin API, console, metrics: on the admin port; absent from the client port, and the 404
    # there names none of them.
    for path in ("/admin/v1/teams", "/metrics", "/admin/ui/login"):
        assert get(f"{served.admin}{path}", key=served.token).status == 200, path
        missing = get(f"{served.client}{path}", key=served.token)
        assert missing.status == 404, path
        named = missing.json()["error"]["message"].split("serves:")[1]
        assert "/admin/" not in named, named
        assert "/metrics" not in named, named
    # SCIM, the IdP's provisioning: the admin port only, like the admin API.
    scim = get(f"{served.admin}/scim/v2/ServiceProviderConfig", key="scim-" + served.token)
    assert scim.json()["patch"] == {"supported": True}
    assert get(f"{served.client}/scim/v2/ServiceProviderConfig", key="scim-" + served.token).status == 404

    # GET / on each listener names what it serves.
    assert get(f"{served.client}/").json()["client_apis"]["openai"] == "/v1"
    assert "console" not in get(f"{served.client}/").json()
    home = get(f"{served.admin}/").json()
    assert home["console"] == "/admin/ui/"
    assert "client_apis" not in home

    # One server, one drain: SIGTERM stops both listeners and exits 0.
    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(timeout=15) == 0
    for url in (served.client, served.admin):
        with pytest.raises(urllib.error.URLError, match="refused"):
            get(f"{url}/healthz", timeout=2)


def test_without_an_admin_port_one_listener_serves_everything_and_names_the_console(
    gateway: Gateway,
) -> None:
    home = get(f"{gateway.url}/").json()
    assert home["console"] == "/admin/ui/"
    assert home["client_apis"]["openai"] == "/v1"
    assert get(f"{gateway.url}/metrics").status == 200


def test_the_admin_port_setting_is_off_by_default_and_must_differ_from_the_port() -> None:
    from gateway.config import Settings
    from gateway.errors import ConfigError

    assert Settings.from_env({}).admin_port is None
    assert Settings.from_env({"SLUICEGATE_ADMIN_PORT": "8081"}).admin_port == 8081
    for bad in ("8080", "70000", "x"):
        with pytest.raises(ConfigError, match="SLUICEGATE_ADMIN_PORT"):
            Settings.from_env({"SLUICEGATE_ADMIN_PORT": bad})
