"""The README's first command as a newcomer runs it: `sluicegate demo` prints a key and examples
that work as printed, and Ctrl-C stops everything. The admin CLI against a real gateway."""

from __future__ import annotations

import http.client
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.redis import keys
from tests.conftest import FAKE_MODEL, Gateway
from tests.http import post
from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]


def _start_demo(port: int, *flags: str, **env: str) -> tuple[subprocess.Popen[str], str]:
    """`sluicegate demo` as a newcomer runs it, and its banner (once it printed the last line)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "demo", "--port", str(port), *flags],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
    )
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "usage --team" in line:
            break
    return process, "".join(lines)


def _stop(process: subprocess.Popen[str]) -> None:
    """Ctrl-C, as a user stops it: a kill would leave its redis-server and worker running."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    if process.stdout is not None:
        process.stdout.close()


@pytest.fixture
def demo() -> Iterator[tuple[subprocess.Popen[str], str]]:
    process, banner = _start_demo(free_port())
    try:
        yield process, banner
    finally:
        _stop(process)


def _curl(banner: str) -> list[str]:
    curl = re.search(r"^  (curl -s .*?)\n\n", banner, re.S | re.M)
    assert curl is not None, banner
    return shlex.split(curl.group(1).replace("\\\n", " "))


def test_demo_prints_a_working_key_curl_and_sdk_example_and_stops_on_ctrl_c(
    demo: tuple[subprocess.Popen[str], str], tmp_path: Path
) -> None:
    process, banner = demo
    assert "API key  sk-sg-" in banner, banner
    reply = subprocess.run(_curl(banner), capture_output=True, text=True, timeout=30, check=True)
    answer = json.loads(reply.stdout)
    assert answer["choices"][0]["message"]["content"].startswith("tok0")

    sdk = re.search(r"^(from openai import OpenAI\n.*?flush=True\)\n)", banner, re.S | re.M)
    assert sdk is not None, banner
    assert len(sdk.group(1).strip().splitlines()) == 5
    script = tmp_path / "example.py"
    script.write_text(sdk.group(1))
    ran = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=30, check=True
    )
    assert ran.stdout.startswith("tok0 tok1")

    children = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(process.pid)], capture_output=True, text=True, check=False
    ).stdout.split()
    assert len(children) == 2, "redis-server and the demo worker run as children"
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=15) == 0
    for pid in children:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_demo_count_tokens_is_the_workers_exact_count_on_both_models(
    demo: tuple[subprocess.Popen[str], str],
) -> None:
    """count_tokens answers what the same prompt is billed (issue 37: 13 for a 3-word prompt billed
    as 3, the gateway's estimate), and its header says it is the worker's count."""
    _, banner = demo
    base, key = _field(banner, r"gateway  (\S+)"), _field(banner, r"API key  (\S+)")
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    messages = [{"role": "user", "content": "say hi now"}]
    for model in ("demo-model", "demo-native"):
        counted = post(
            f"{base}/v1/messages/count_tokens", {"model": model, "messages": messages}, headers=headers
        )
        assert counted.status == 200, counted.body
        assert counted.headers["x-sluicegate-token-count"] == "worker", model
        turn = post(
            f"{base}/v1/messages", {"model": model, "max_tokens": 4, "messages": messages}, headers=headers
        )
        assert turn.status == 200, turn.body
        assert counted.json()["input_tokens"] == turn.json()["usage"]["input_tokens"], model


def test_demo_starts_again_on_its_port_right_after_ctrl_c_and_its_printed_commands_run(
    tmp_path: Path,
) -> None:
    port = free_port()
    process, banner = _start_demo(port)
    try:
        # -i: the key's visible limit shows in the headers; the gateway closes this connection
        # when it stops, which leaves the port's side of it in TIME_WAIT.
        reply = subprocess.run(["curl", "-i", *_curl(banner)[1:]], capture_output=True, text=True, timeout=30)
        assert "x-ratelimit-limit-requests: 600" in reply.stdout.lower(), reply.stdout
        admin = banner[banner.index("Admin commands") :]
        script = tmp_path / "admin.sh"
        script.write_text(
            "set -e\n" + "\n".join(line.strip() for line in admin.splitlines()[1:] if line.strip())
        )
        ran = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr  # as printed, from any directory, venv active or not
        # A keep-alive connection the demo closes itself when it stops: the port's side of it is
        # left in TIME_WAIT, which must not make the port look busy to the next start.
        held = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        held.request("GET", "/healthz")
        assert held.getresponse().read()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=15) == 0
        held.close()
    finally:
        _stop(process)
    again, banner = _start_demo(port)
    try:
        assert "API key  sk-sg-" in banner, banner
    finally:
        _stop(again)


def test_demo_uses_the_redis_it_is_given(redis_server: EmbeddedRedis, redis_client: redis.Redis) -> None:
    for _ in range(2):  # the second run finds the demo team of the first
        process, banner = _start_demo(free_port(), SLUICEGATE_REDIS_URL=redis_server.url)
        try:
            assert "(SLUICEGATE_REDIS_URL)" in banner, banner
            key_id = re.search(r"\(id (key_\w+);", banner)
            assert key_id is not None, banner
            assert redis_client.exists(keys.key_hash_by_id(key_id.group(1)))  # the key is in that Redis
            children = subprocess.run(
                ["ps", "-o", "pid=", "--ppid", str(process.pid)], capture_output=True, text=True, check=False
            ).stdout.split()
            assert len(children) == 1, "only the demo worker: no Redis of its own"
            reply = subprocess.run(_curl(banner), capture_output=True, text=True, timeout=30, check=True)
            assert json.loads(reply.stdout)["choices"][0]["message"]["content"].startswith("tok0")
        finally:
            _stop(process)


def _field(banner: str, pattern: str) -> str:
    found = re.search(pattern, banner)
    assert found is not None, banner
    return found.group(1)


def _stream_cut_by_ctrl_c(port: int, key: str, process: subprocess.Popen[str]) -> list[bytes]:
    """A long stream, Ctrl-C once its first tokens arrived; every SSE data line it got."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = {"model": "demo-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    conn.request(
        "POST",
        "/v1/chat/completions",
        json.dumps(body),
        {
            "authorization": f"Bearer {key}",
            "content-type": "application/json",
            # Far longer than the demo's drain: the drain must cut it.
            "x-fake-tokens": "2000",
            "x-fake-token-delay-ms": "50",
        },
    )
    response = conn.getresponse()
    assert response.status == 200
    lines: list[bytes] = []
    while len(lines) < 3:
        line = response.readline()
        if line.startswith(b"data: "):
            lines.append(line.strip())
    process.send_signal(signal.SIGINT)
    while line := response.readline():
        if line.startswith(b"data: "):
            lines.append(line.strip())
    conn.close()
    return lines


def test_demo_ctrl_c_ends_an_open_stream_like_serve_and_state_survives_a_restart(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    port = free_port()
    process, banner = _start_demo(port, "--state", state)
    try:
        key = _field(banner, r"API key  (sk-sg-\S+)")
        token = _field(banner, r"sign in with the admin token: (\S+)\)")
        assert f"kept in {state}" in banner
        children = subprocess.run(
            ["ps", "-o", "pid=,pgid=", "--ppid", str(process.pid)],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        # Redis and the worker lead process groups of their own: the terminal's Ctrl-C skips them.
        assert len(children) == 4
        assert children[0] == children[1]
        assert children[2] == children[3]
        lines = _stream_cut_by_ctrl_c(port, key, process)
        assert process.wait(timeout=30) == 0
        assert process.stdout is not None
        rest = process.stdout.read()
        assert "Traceback" not in rest
        assert "CancelledError" not in rest
        assert "sluicegate demo stopped." in rest
    finally:
        _stop(process)
    assert lines[-1] == b"data: [DONE]"
    error = json.loads(lines[-2][6:])
    assert error["error"]["code"] == "shutting_down", error

    # Started again on the same state: the same token and key, and the cut stream was metered.
    again, banner = _start_demo(port, "--state", state)
    try:
        assert _field(banner, r"API key  (sk-sg-\S+)") == key
        assert _field(banner, r"sign in with the admin token: (\S+)\)") == token
        env = {**os.environ, "SLUICEGATE_URL": f"http://127.0.0.1:{port}", "SLUICEGATE_ADMIN_TOKEN": token}
        usage = subprocess.run(
            [sys.executable, "-m", "gateway", "usage", "--team", "demo", "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            check=True,
        )
        rows = json.loads(usage.stdout)
        assert sum(row["completion_tokens"] for row in rows) >= 2, rows

        # The second demo model passes the Responses API through natively: a stored response
        # and a turn that continues it by previous_response_id.
        first = _responses(port, key, {"model": "demo-native", "input": "hi", "store": True})
        second = _responses(
            port, key, {"model": "demo-native", "input": "more", "previous_response_id": first["id"]}
        )
        assert second["status"] == "completed", second
    finally:
        _stop(again)


def _responses(port: int, key: str, body: dict[str, object]) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(
            "POST",
            "/v1/responses",
            json.dumps(body),
            {"authorization": f"Bearer {key}", "content-type": "application/json"},
        )
        response = conn.getresponse()
        answer: dict[str, Any] = json.loads(response.read())
        assert response.status == 200, answer
        return answer
    finally:
        conn.close()


def _cli(gw: Gateway, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SLUICEGATE_URL": gw.url, "SLUICEGATE_ADMIN_TOKEN": gw.admin_token}
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )


def test_admin_cli_creates_lists_revokes_and_reports(gateway: Gateway) -> None:
    assert _cli(gateway, "teams", "create", "cli-team").returncode == 0
    assert "cli-team" in _cli(gateway, "teams", "list").stdout
    created = _cli(
        gateway,
        "keys",
        "create",
        "--team",
        "cli-team",
        "--models",
        f"{FAKE_MODEL},renamed",
        "--rpm",
        "7",
        "--json",
    )
    assert created.returncode == 0, created.stderr
    key = json.loads(created.stdout)
    assert key["key"].startswith("sk-sg-")
    assert key["rpm"] == 7
    gateway.secrets_created.append(key["key"])

    client = gateway.client(key["key"])
    client.chat.completions.create(model=FAKE_MODEL, messages=[{"role": "user", "content": "one two"}])

    listing = _cli(gateway, "keys", "list", "--team", "cli-team").stdout
    assert key["id"] in listing
    assert key["key"] not in listing
    usage = _cli(gateway, "usage", "--team", "cli-team").stdout
    assert re.search(rf"{key['id']}\s+{FAKE_MODEL}\s+\S+\s+1\s+2\s+8", usage), usage
    csv_out = _cli(gateway, "usage", "--team", "cli-team", "--csv").stdout.splitlines()
    assert csv_out[0].startswith("team,key_id,model,day,requests")

    assert _cli(gateway, "keys", "revoke", key["id"]).returncode == 0
    revoked = _cli(gateway, "keys", "revoke", "key_doesnotexist")
    assert revoked.returncode == 1
    assert "No key has the id" in revoked.stderr


def test_admin_api_refuses_a_wrong_token_and_bad_input(gateway: Gateway) -> None:
    env_wrong = _cli(Gateway(gateway.url, "wrong-token", gateway.settings), "teams", "list")
    assert env_wrong.returncode == 1
    assert "HTTP 401" in env_wrong.stderr
    assert "wrong-token" not in env_wrong.stderr
    bad_team = _cli(gateway, "teams", "create", "Not Valid!")
    assert "HTTP 400" in bad_team.stderr
    assert _cli(gateway, "keys", "create", "--team", "no-such-team").stderr.count("HTTP 404") == 1
    team = gateway.new_team()
    assert "HTTP 409" in _cli(gateway, "teams", "create", team).stderr


def test_cli_rotates_with_a_grace_and_creates_expiring_keys(gateway: Gateway) -> None:
    team = gateway.new_team()
    created = _cli(gateway, "keys", "create", "--team", team, "--expires", "2099-01-01", "--json")
    key = json.loads(created.stdout)
    gateway.secrets_created.append(key["key"])
    assert key["expires_at"] == 4070908800.0
    rotated = _cli(gateway, "keys", "rotate", key["id"], "--grace", "1h")
    assert rotated.returncode == 0, rotated.stderr
    new_secret = rotated.stdout.strip()
    gateway.secrets_created.append(new_secret)
    assert new_secret.startswith("sk-sg-")
    assert new_secret != key["key"]
    assert "3600 s" in rotated.stderr
    client = gateway.client(new_secret)
    assert client.chat.completions.create(
        model=FAKE_MODEL, messages=[{"role": "user", "content": "x"}]
    ).choices
    bad = _cli(gateway, "keys", "rotate", key["id"], "--grace", "soon")
    assert bad.returncode == 2
    assert "not a duration" in bad.stderr
