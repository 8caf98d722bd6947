"""`sluicegate login` against a real OpenID provider: the device grant completed as a person would
(the provider's own confirmation, login and consent pages), then admin commands as that person,
the tokens kept 0600 and refreshed, `logout`; and each way the device grant can end, from a
scripted token endpoint."""

from __future__ import annotations

import http.server
import json
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from gateway.cli.client import CliError
from gateway.cli.login import _device_flow
from tests.cli import ROOT, cli_env, run_cli
from tests.conftest import Gateway, GatewayFactory
from tests.identity.conftest import oidc_settings
from tests.identity.idp import Idp


@pytest.fixture
def cli_gateway(make_gateway: GatewayFactory, idp: Idp) -> Iterator[Gateway]:
    with make_gateway(oidc=oidc_settings(idp), oidc_cli_client_id="sluicegate-cli") as gw:
        yield gw


def _env(gw: Gateway, home: Path) -> dict[str, str]:
    return cli_env(gw.url, XDG_CONFIG_HOME=str(home))


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(env, *args)


def test_login_with_the_device_grant_then_admin_commands_act_as_that_person(
    cli_gateway: Gateway, idp: Idp, tmp_path: Path
) -> None:
    gw = cli_gateway
    team = gw.new_team()
    binding = gw.admin.call(
        "POST", "/admin/v1/role-bindings", {"group": "red-leads", "role": "team-admin", "team": team}
    )
    env = _env(gw, tmp_path)
    login = subprocess.Popen(
        [sys.executable, "-m", "gateway", "login"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert login.stderr is not None
        url = ""
        for line in login.stderr:
            if line.startswith("Open "):
                url = line.split(" ", 1)[1].strip()
                break
        assert url.startswith(f"{idp.issuer}/device")
        assert "Sign-in Success" in idp.confirm_device(url, "bob")
        out, err = login.communicate(timeout=60)
    finally:
        login.kill()
    assert login.returncode == 0, err
    assert f"signed in as bob@example.test: team-admin of {team}" in out

    stored = tmp_path / "sluicegate" / "login.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert stat.S_IMODE(stored.parent.stat().st_mode) == 0o700
    gw.secrets_created.append(json.loads(stored.read_text())["access_token"])

    made = _cli(env, "keys", "create", "--team", team, "--json")
    assert made.returncode == 0, made.stderr
    assert "# as bob@example.test (sluicegate login)" in made.stderr
    key = json.loads(made.stdout)
    gw.secrets_created.append(key["key"])
    assert key["created_by"]["sub"] == "bob"

    # An expired access token is refreshed with the refresh token, and kept.
    before = json.loads(stored.read_text())
    stored.write_text(json.dumps({**before, "expires_at": 0}))
    listed = _cli(env, "keys", "list", "--team", team)
    assert listed.returncode == 0, listed.stderr
    assert key["id"] in listed.stdout
    after = json.loads(stored.read_text())
    assert after["access_token"] != before["access_token"]
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    gw.secrets_created.append(after["access_token"])

    # The admin token in the environment is the explicit break-glass choice, and says so.
    as_token = _cli({**env, "SLUICEGATE_ADMIN_TOKEN": gw.admin_token}, "whoami")
    assert "# as the admin token (SLUICEGATE_ADMIN_TOKEN)" in as_token.stderr
    assert "token" in as_token.stdout

    out_done = _cli(env, "logout")
    assert out_done.returncode == 0
    assert "signed out bob@example.test" in out_done.stdout
    assert not stored.exists()
    refused = _cli(env, "keys", "list")
    assert refused.returncode == 2
    assert "not signed in: run `sluicegate login`" in refused.stderr
    gw.admin.call("DELETE", f"/admin/v1/role-bindings/{binding['id']}")


class _TokenEndpoint(http.server.BaseHTTPRequestHandler):
    """A device grant's two endpoints, answering the token polls from a script."""

    answers: ClassVar[list[tuple[int, dict[str, Any]]]] = []
    polls: ClassVar[int] = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.path == "/device":
            status, body = (
                200,
                {"device_code": "dc", "user_code": "ABCD-EFGH", "verification_uri": "x", "interval": 0},
            )
        else:
            type(self).polls += 1
            status, body = type(self).answers.pop(0)
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        return


@pytest.mark.parametrize(
    ("script", "outcome"),
    [
        ([(400, {"error": "authorization_pending"}), (400, {"error": "expired_token"})], "the code expired"),
        ([(400, {"error": "access_denied"})], "the sign-in was refused"),
        ([(400, {"error": "invalid_grant"})], "ended the sign-in: invalid_grant"),
        ([(400, {"error": "slow_down"}), (200, {"access_token": "at", "expires_in": 60})], None),
    ],
)
def test_each_end_of_the_device_grant(script: list[tuple[int, dict[str, Any]]], outcome: str | None) -> None:
    _TokenEndpoint.answers, _TokenEndpoint.polls = list(script), 0
    server = http.server.HTTPServer(("127.0.0.1", 0), _TokenEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    document = {"device_authorization_endpoint": f"{base}/device", "token_endpoint": f"{base}/token"}
    try:
        if outcome is None:
            assert _device_flow(document, "cli", "openid")["access_token"] == "at"
        else:
            with pytest.raises(CliError, match=outcome):
                _device_flow(document, "cli", "openid")
    finally:
        server.shutdown()
        server.server_close()
    assert _TokenEndpoint.polls == len(script)  # no poll after the end, none skipped
