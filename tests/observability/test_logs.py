"""Access logs: JSON lines (SLUICEGATE_LOG_FORMAT=json) with every field an operator asks for, the
worker endpoint in text lines too, no line forged by what a client sends, no secret, and the client
address from X-Forwarded-For only when the peer is a trusted proxy."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.cli import AdminClient
from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.observability.logs import JsonFormatter
from tests.conftest import FAKE_MODEL, GatewayFactory
from tests.http import post
from tests.servers import free_port
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
HELLO: list[Any] = [{"role": "user", "content": "hi"}]
ACCESS_FIELDS = {
    "request_id",
    "client_request_id",
    "method",
    "path",
    "status",
    "api",
    "model",
    "served_by_model",
    "team",
    "key_id",
    "endpoint",
    "attempts",
    "ttft_ms",
    "duration_ms",
    "prompt_tokens",
    "completion_tokens",
    "outcome",
    "client",
    "user_agent",
    "requested_model",
    "error",
    "param",
    "session",
}


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def json_lines() -> Iterator[list[str]]:
    """Every record of every logger while the test runs, as the JSON format writes it."""
    handler = _Lines()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler.lines
    finally:
        root.removeHandler(handler)


def _access(lines: list[str], request_id: str) -> dict[str, Any]:
    found = [r for r in map(json.loads, lines) if r.get("request_id") == request_id]
    assert len(found) == 1, (request_id, lines)
    record: dict[str, Any] = found[0]
    return record


def test_a_json_access_line_carries_every_field(
    make_gateway: GatewayFactory, json_lines: list[str], all_logs: list[str], fake_worker: str
) -> None:
    with make_gateway() as gw:
        key = gw.new_key()
        raw = gw.client(key["key"]).chat.completions.with_raw_response.create(
            model="default",
            messages=HELLO,
            stream=True,
            extra_headers={"x-request-id": "client-42", "x-fake-tokens": "3"},
        )
        list(raw.parse())
        request_id = raw.headers["x-sluicegate-request-id"]
        wait_until(lambda: any(request_id in line for line in json_lines), 10, "the access line")
    for line in json_lines:
        assert "\n" not in line
        json.loads(line)  # every line, of every logger
    record = _access(json_lines, request_id)
    assert record.keys() >= ACCESS_FIELDS
    assert record.keys() >= {"timestamp", "level", "logger", "message"}
    assert record["logger"] == "sluicegate.access"
    assert record["level"] == "INFO"
    assert record["message"] == "POST /v1/chat/completions 200"
    assert record["client_request_id"] == "client-42"
    assert (record["method"], record["path"], record["status"]) == ("POST", "/v1/chat/completions", 200)
    assert (record["api"], record["model"], record["served_by_model"]) == ("chat", FAKE_MODEL, FAKE_MODEL)
    assert (record["team"], record["key_id"]) == (key["team"], key["id"])
    assert record["endpoint"] == fake_worker
    assert record["attempts"] == 1
    assert isinstance(record["ttft_ms"], float)
    assert 0 < record["ttft_ms"] <= record["duration_ms"]
    assert record["completion_tokens"] == 3
    assert record["prompt_tokens"] >= 1
    assert record["outcome"] == "ok"
    assert record["client"] == "127.0.0.1"
    assert record["user_agent"].startswith("OpenAI/Python")
    # The text line names the worker endpoint too.
    text = [line for line in all_logs if f"request_id={request_id}" in line]
    assert len(text) == 1
    assert f" endpoint={fake_worker} " in text[0]
    assert key["key"] not in "\n".join(json_lines)


def test_a_refused_request_logs_nulls_not_dashes_and_the_limit(
    make_gateway: GatewayFactory, json_lines: list[str]
) -> None:
    with make_gateway() as gw:
        key = gw.new_key(rpm=1)
        post(f"{gw.url}/v1/chat/completions", {"model": FAKE_MODEL, "messages": HELLO}, key=key["key"])
        refused = post(
            f"{gw.url}/v1/chat/completions", {"model": FAKE_MODEL, "messages": HELLO}, key=key["key"]
        )
        assert refused.status == 429
        request_id = refused.headers["x-sluicegate-request-id"]
        wait_until(lambda: any(request_id in line for line in json_lines), 10, "the access line")
    record = _access(json_lines, request_id)
    assert record["status"] == 429
    assert record["limit"] == "key/rpm"
    assert (record["endpoint"], record["ttft_ms"], record["outcome"]) == (None, None, None)
    assert record["attempts"] == 0


def test_a_forged_newline_cannot_forge_a_json_line(
    make_gateway: GatewayFactory, json_lines: list[str]
) -> None:
    forged = '{"level":"INFO","logger":"sluicegate.access","request_id":"forged"}'
    with make_gateway() as gw:
        host, port = gw.url.removeprefix("http://").split(":")
        for control in ("%0A", "%0D%0A", "%E2%80%A8"):
            path = f"/v1/x{control}{forged}".replace('"', "%22").replace(" ", "%20")
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                sock.sendall(f"GET {path} HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n".encode())
                while sock.recv(65536):
                    pass
        wait_until(lambda: sum("forged" in line for line in json_lines) >= 3, 10, "three access lines")
    lines = [line for line in json_lines if "forged" in line]
    assert len(lines) == 3
    for line in lines:
        assert line.isprintable()
        assert line.isascii()
        record = json.loads(line)
        assert record["request_id"] != "forged"
        assert record["path"].startswith("/v1/x\\")  # the control character, escaped


@pytest.mark.parametrize(
    ("trusted", "forwarded_for", "client"),
    [
        ((), "198.51.100.7", "127.0.0.1"),  # an untrusted peer's claim is ignored
        (("127.0.0.1",), "198.51.100.7", "198.51.100.7"),
        (("127.0.0.0/8",), "198.51.100.7, 127.0.0.5", "198.51.100.7"),  # the nearest untrusted hop
        (("127.0.0.1",), "", "127.0.0.1"),
    ],
)
def test_the_client_address_comes_from_x_forwarded_for_only_behind_a_trusted_proxy(
    make_gateway: GatewayFactory,
    json_lines: list[str],
    trusted: tuple[str, ...],
    forwarded_for: str,
    client: str,
) -> None:
    with make_gateway(trusted_proxies=trusted) as gw:
        key = gw.new_key()["key"]
        headers = {"x-forwarded-for": forwarded_for} if forwarded_for else {}
        reply = post(
            f"{gw.url}/v1/chat/completions",
            {"model": FAKE_MODEL, "messages": HELLO},
            key=key,
            headers=headers,
        )
        assert reply.status == 200
        request_id = reply.headers["x-sluicegate-request-id"]
        wait_until(lambda: any(request_id in line for line in json_lines), 10, "the access line")
    assert _access(json_lines, request_id)["client"] == client


# --- real processes -------------------------------------------------------------------------------


def _wait_healthy(url: str, process: subprocess.Popen[str]) -> None:
    import urllib.request

    def up() -> bool:
        assert process.poll() is None, "the gateway exited at start"
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as reply:  # noqa: S310
                return bool(reply.status == 200)
        except OSError:
            return False

    wait_until(up, 30, "the gateway listening")


def test_sluicegate_serve_writes_every_line_as_json(
    redis_server: EmbeddedRedis, fake_worker: str, tmp_path: Path
) -> None:
    table = tmp_path / "models.yaml"
    table.write_text(f"models:\n  - name: {FAKE_MODEL}\n    endpoints: [{{url: {fake_worker}}}]\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    admin_token = "adm-" + "a1" * 20
    env = {
        **os.environ,
        "SLUICEGATE_REDIS_URL": redis_server.url,
        "SLUICEGATE_CONFIG": str(table),
        "SLUICEGATE_ADMIN_TOKEN": admin_token,
        "SLUICEGATE_HOST": "127.0.0.1",
        "SLUICEGATE_PORT": str(port),
        "SLUICEGATE_LOG_FORMAT": "json",
        "SLUICEGATE_SHUTDOWN_DELAY": "0",
        "SLUICEGATE_SPOOL_PATH": str(tmp_path / "spool"),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_healthy(url, process)
        admin = AdminClient(url, admin_token)
        admin.call("POST", "/admin/v1/teams", {"name": "json-logs"})
        key = admin.call("POST", "/admin/v1/keys", {"team": "json-logs"})
        reply = post(f"{url}/v1/chat/completions", {"model": FAKE_MODEL, "messages": HELLO}, key=key["key"])
        assert reply.status == 200
        request_id = reply.headers["x-sluicegate-request-id"]
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
    lines = [line for line in output.splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line, uvicorn's own included
    assert any(r["logger"].startswith("uvicorn") for r in records), lines
    access = [r for r in records if r.get("request_id") == request_id]
    assert len(access) == 1, lines
    assert access[0]["endpoint"] == fake_worker
    assert access[0]["team"] == "json-logs"
    assert key["key"] not in output
    assert admin_token not in output


def test_the_demo_shows_access_lines() -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "demo", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in process.stdout or ():
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        banner = _read_until(lines, lambda line: "usage --team" in line)
        curl = re.search(r"^  (curl -s .*?)\n\n", banner, re.S | re.M)
        assert curl is not None, banner
        command = curl.group(1).replace("\\\n", " ")
        subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=30, check=True)
        access = _read_until(lines, lambda line: "sluicegate.access" in line)
        assert "path=/v1/chat/completions status=200" in access
        assert "endpoint=http://127.0.0.1:" in access
    finally:
        process.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=15)
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        reader.join(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


def _read_until(lines: queue.Queue[str], done: Any, within_s: float = 30.0) -> str:
    seen: list[str] = []
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            break
        seen.append(line)
        if done(line):
            return "".join(seen)
    raise AssertionError(f"not within {within_s}s: {''.join(seen)}")


AGENT = "claude-cli/2.1.332 (external, cli)"


@pytest.mark.parametrize(
    ("body", "status", "error", "param"),
    [
        ({"model": "claude-opus-4-8[1m]", "messages": HELLO}, 404, "model_not_found", "model"),
        ({"model": FAKE_MODEL, "messages": "not a list"}, 400, "invalid_request", "messages"),
        ({"model": FAKE_MODEL, "messages": HELLO}, 429, "rate_limit_exceeded", None),
    ],
    ids=["unknown-model", "bad-body", "limited"],
)
def test_a_refusal_logs_its_code_param_model_and_user_agent_in_both_formats(
    make_gateway: GatewayFactory,
    json_lines: list[str],
    all_logs: list[str],
    body: dict[str, Any],
    status: int,
    error: str,
    param: str | None,
) -> None:
    with make_gateway() as gw:
        key = gw.new_key(rpm=1)
        if status == 429:  # the key's one request a minute is spent
            post(f"{gw.url}/v1/chat/completions", body, key=key["key"])
        headers = {"user-agent": AGENT, "x-claude-code-session-id": "s-1"}
        reply = post(f"{gw.url}/v1/chat/completions", body, key=key["key"], headers=headers)
        assert reply.status == status, reply.body
        assert reply.json()["error"]["code"] == error  # what the client was told is what is logged
        request_id = reply.headers["x-sluicegate-request-id"]
        wait_until(lambda: any(request_id in line for line in json_lines), 10, "the access line")
    record = _access(json_lines, request_id)
    assert (record["status"], record["error"], record["param"]) == (status, error, param)
    assert record["requested_model"] == body["model"]
    assert record["user_agent"] == AGENT
    text = next(line for line in all_logs if f"request_id={request_id}" in line)
    assert f" error={error} param={param or '-'} " in text
    assert f" requested_model={body['model']} " in text
    assert text.endswith(f' user_agent="{AGENT}"')  # quoted: it holds spaces
    assert key["key"] not in text


def test_an_agent_turn_logs_which_session_value_placed_it(
    make_gateway: GatewayFactory, json_lines: list[str]
) -> None:
    with make_gateway() as gw:
        key = gw.new_key()
        body = {"model": FAKE_MODEL, "input": "hi", "prompt_cache_key": "codex-thread-1"}
        reply = post(f"{gw.url}/v1/responses", body, key=key["key"], headers={"session-id": "codex-thread-1"})
        assert reply.status == 200, reply.body
        request_id = reply.headers["x-sluicegate-request-id"]
        wait_until(lambda: any(request_id in line for line in json_lines), 10, "the access line")
    record = _access(json_lines, request_id)
    assert record["session"] == "session-id"  # the header's name, never the agent's value
    assert "codex-thread-1" not in json.dumps(record)
    assert (record["error"], record["param"]) == (None, None)


def test_a_key_cut_by_a_fields_bound_leaves_no_piece_of_it(
    make_gateway: GatewayFactory, json_lines: list[str], all_logs: list[str]
) -> None:
    """The model and user agent are bounded at 256 characters: a key the bound cuts through must
    not survive as a piece too short for the redaction's pattern (`sk-sg-` and 7 of its characters)."""
    with make_gateway() as gw:
        key = gw.new_key()["key"]
        padded = "x" * (256 - len("sk-sg-") - 7) + key  # the bound leaves `sk-sg-` + 7 characters
        body = {"model": padded, "messages": HELLO}
        reply = post(f"{gw.url}/v1/chat/completions", body, key=key, headers={"user-agent": padded})
        assert reply.status == 404, reply.body
        request_id = reply.headers["x-sluicegate-request-id"]
        wait_until(lambda: any(request_id in line for line in json_lines), 10, "the access line")
    logged = "\n".join([*json_lines, *all_logs])
    assert request_id in logged
    assert key[: len("sk-sg-") + 5] not in logged
