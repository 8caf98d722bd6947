"""The real `sluicegate` command with people: `roles bind|list|unbind`, `whoami` as a person and
as the admin token, and `audit` naming who did what with ISO 8601 times."""

from __future__ import annotations

import json
import re
import subprocess

from tests.cli import cli_env, run_cli
from tests.conftest import Gateway
from tests.identity.idp import Idp


def cli(gw: Gateway, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(cli_env(gw.url, SLUICEGATE_ADMIN_TOKEN=token), *args)


def ok(gw: Gateway, token: str, *args: str) -> str:
    done = cli(gw, token, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_roles_whoami_and_audit_from_the_terminal(oidc_gateway: Gateway, idp: Idp) -> None:
    gw = oidc_gateway
    team = gw.new_team()
    admin = gw.admin_token
    bound = ok(gw, admin, "roles", "bind", "--group", "red-leads", "--role", "team-admin", "--team", team)
    binding_id = re.search(r"rb_[0-9a-f]{16}", bound)
    assert binding_id is not None
    assert f"bound team-admin on team {team} to group:red-leads" in bound
    listed = ok(gw, admin, "roles", "list", "--team", team)
    assert binding_id.group() in listed
    assert "admin token" in listed  # who made the binding

    assert "kind       token" in ok(gw, admin, "whoami")
    bob = idp.access_token("bob")
    gw.secrets_created.append(bob)
    me = ok(gw, bob, "whoami")
    assert "bob@example.test" in me
    assert f"team-admin on {team} (via {binding_id.group()})" in me
    made = json.loads(ok(gw, bob, "keys", "create", "--team", team, "--json", "--expires", "2099-01-31"))
    gw.secrets_created.append(made["key"])
    ok(gw, bob, "keys", "update", made["id"], "--no-expiry")

    audit = ok(gw, admin, "audit", "--team", team)
    assert "bob@example.test (Bob Lead)" in audit
    assert "expires_at: 2099-01-31T00:00:00Z -> -" in audit  # not 4073500800.0
    assert "admin token" in audit

    refused = cli(gw, bob, "roles", "bind", "--user", "bob", "--role", "platform-admin")
    assert refused.returncode == 1
    assert "HTTP 403: This needs the platform-admin role." in refused.stderr
    ok(gw, admin, "roles", "unbind", binding_id.group())
    assert "no role is bound to you" in cli(gw, bob, "keys", "list").stderr
    assert "none: ask a platform admin" in ok(gw, bob, "whoami")
