"""Roles bound to IdP groups and users decide what a person may do on the admin API: team admins
run their own team's keys within its limits, viewers read, auditors read everything, a person with
no binding is refused, and a removed binding takes effect on every replica at once."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.cli import AdminClient
from tests.conftest import Gateway, GatewayFactory
from tests.http import call
from tests.identity.conftest import oidc_settings
from tests.identity.idp import Idp


@dataclass
class Teams:
    red: str
    blue: str


def answer(gw: Gateway, token: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    gw.secrets_created.append(token)  # no log line may hold it (tests/conftest.py's session check)
    reply = call(method, f"{gw.url}{path}", key=token, body=body)
    return reply.status, reply.json()


def ok(gw: Gateway, token: str, method: str, path: str, body: Any = None) -> Any:
    status, result = answer(gw, token, method, path, body)
    assert status in (200, 201), (method, path, status, result)
    return result


def refused(gw: Gateway, token: str, method: str, path: str, body: Any = None, status: int = 403) -> str:
    got, result = answer(gw, token, method, path, body)
    assert got == status, (method, path, got, result)
    message: str = result["error"]["message"]
    return message


@pytest.fixture
def teams(oidc_gateway: Gateway) -> Iterator[Teams]:
    """Two teams, red (rpm 100) and blue, with bob's group team-admin of red, carol (by her email,
    in another case) team-viewer of red, and erin (by subject) auditor."""
    red, blue = ("red-" + secrets.token_hex(3), "blue-" + secrets.token_hex(3))
    admin = oidc_gateway.admin
    admin.call("POST", "/admin/v1/teams", {"name": red, "rpm": 100, "daily_tokens": 1000})
    admin.call("POST", "/admin/v1/teams", {"name": blue})
    made = [
        admin.call(
            "POST", "/admin/v1/role-bindings", {"group": "red-leads", "role": "team-admin", "team": red}
        ),
        admin.call(
            "POST",
            "/admin/v1/role-bindings",
            {"user": "carol@example.test", "role": "team-viewer", "team": red},
        ),
        admin.call("POST", "/admin/v1/role-bindings", {"user": "erin", "role": "auditor"}),
    ]
    yield Teams(red, blue)
    for binding in made:
        admin.call("DELETE", f"/admin/v1/role-bindings/{binding['id']}")


def test_a_team_admin_runs_their_teams_keys_and_nothing_else(
    oidc_gateway: Gateway, idp: Idp, teams: Teams
) -> None:
    bob = idp.access_token("bob")
    gw = oidc_gateway
    me = ok(gw, bob, "GET", "/admin/v1/me")
    assert [(r["role"], r["team"]) for r in me["roles"]] == [("team-admin", teams.red)]

    key = ok(gw, bob, "POST", "/admin/v1/keys", {"team": teams.red, "name": "ci", "rpm": 50})
    gw.secrets_created.append(key["key"])
    assert key["created_by"]["sub"] == "bob"
    ok(gw, bob, "PATCH", f"/admin/v1/keys/{key['id']}", {"rpm": 20})
    rotated = ok(gw, bob, "POST", f"/admin/v1/keys/{key['id']}/rotate", {})
    gw.secrets_created.append(rotated["key"])
    ok(gw, bob, "GET", f"/admin/v1/usage?team={teams.red}")
    ok(gw, bob, "GET", f"/admin/v1/audit?team={teams.red}")

    # Another team: refused, and the message names what was needed.
    message = refused(gw, bob, "POST", "/admin/v1/keys", {"team": teams.blue})
    assert message == f"This needs the team-admin role on team '{teams.blue}' (or platform-admin)."
    refused(gw, bob, "GET", f"/admin/v1/keys?team={teams.blue}")
    refused(gw, bob, "GET", f"/admin/v1/usage?team={teams.blue}")
    # A key of another team does not exist for them.
    blue_key = gw.new_key(teams.blue)
    refused(gw, bob, "GET", f"/admin/v1/keys/{blue_key['id']}", status=404)
    refused(gw, bob, "DELETE", f"/admin/v1/keys/{blue_key['id']}", status=404)
    # Above the team's own limits, or the team's limits themselves: refused.
    message = refused(gw, bob, "POST", "/admin/v1/keys", {"team": teams.red, "rpm": 101})
    assert "'rpm' is above team" in message
    refused(gw, bob, "PATCH", f"/admin/v1/keys/{key['id']}", {"daily_tokens": 5000})
    refused(gw, bob, "POST", "/admin/v1/keys", {"team": teams.red, "priority": 9})
    refused(gw, bob, "PATCH", f"/admin/v1/teams/{teams.red}", {"rpm": 1000})
    refused(gw, bob, "DELETE", f"/admin/v1/teams/{teams.red}")
    refused(gw, bob, "POST", "/admin/v1/teams", {"name": "bobs-own"})
    refused(gw, bob, "POST", "/admin/v1/role-bindings", {"user": "bob", "role": "platform-admin"})
    refused(gw, bob, "GET", "/admin/v1/role-bindings")
    refused(gw, bob, "GET", "/admin/v1/models")
    # Listings show only red.
    listed = ok(gw, bob, "GET", "/admin/v1/keys")["data"]
    assert {k["team"] for k in listed} == {teams.red}
    assert [t["name"] for t in ok(gw, bob, "GET", "/admin/v1/teams")["data"]] == [teams.red]
    usage_teams = {r["team"] for r in ok(gw, bob, "GET", "/admin/v1/usage")["data"]}
    assert usage_teams <= {teams.red}
    audit = ok(gw, bob, "GET", "/admin/v1/audit")["data"]
    assert audit
    assert {e["team"] for e in audit} == {teams.red}
    ok(gw, bob, "DELETE", f"/admin/v1/keys/{key['id']}")


def test_a_viewer_reads_and_cannot_write(oidc_gateway: Gateway, idp: Idp, teams: Teams) -> None:
    carol = idp.access_token("carol")  # bound by her verified email, in other case
    gw = oidc_gateway
    key = gw.new_key(teams.red)
    assert "key" not in ok(gw, carol, "GET", f"/admin/v1/keys/{key['id']}")
    assert [k["id"] for k in ok(gw, carol, "GET", f"/admin/v1/keys?team={teams.red}")["data"]] == [key["id"]]
    ok(gw, carol, "GET", f"/admin/v1/usage?team={teams.red}")
    message = refused(gw, carol, "POST", "/admin/v1/keys", {"team": teams.red})
    assert message == f"This needs the team-admin role on team '{teams.red}' (or platform-admin)."
    refused(gw, carol, "DELETE", f"/admin/v1/keys/{key['id']}")
    refused(gw, carol, "POST", f"/admin/v1/keys/{key['id']}/rotate", {})
    refused(gw, carol, "GET", f"/admin/v1/audit?team={teams.red}")


def test_an_auditor_reads_every_teams_audit_and_usage_and_changes_nothing(
    oidc_gateway: Gateway, idp: Idp, teams: Teams
) -> None:
    erin = idp.access_token("erin")
    gw = oidc_gateway
    entries = ok(gw, erin, "GET", "/admin/v1/audit?limit=1000")["data"]
    assert {teams.red, teams.blue} <= {e["team"] for e in entries}
    ok(gw, erin, "GET", f"/admin/v1/usage?team={teams.blue}")
    ok(gw, erin, "GET", "/admin/v1/role-bindings")
    refused(gw, erin, "POST", "/admin/v1/keys", {"team": teams.blue})
    refused(gw, erin, "POST", "/admin/v1/teams", {"name": "erins"})


def test_a_person_with_no_binding_is_refused_everywhere_but_me(
    oidc_gateway: Gateway, idp: Idp, teams: Teams
) -> None:
    dave = idp.access_token("dave")
    gw = oidc_gateway
    assert ok(gw, dave, "GET", "/admin/v1/me")["roles"] == []
    for method, path in [
        ("GET", "/admin/v1/teams"),
        ("GET", "/admin/v1/keys"),
        ("GET", "/admin/v1/usage"),
        ("GET", "/admin/v1/audit"),
        ("GET", "/admin/v1/models"),
        ("GET", "/admin/v1/role-bindings"),
        ("POST", "/admin/v1/keys"),
    ]:
        assert "no role is bound to you" in refused(gw, dave, method, path, {} if method == "POST" else None)


def test_the_audit_log_names_each_actor(oidc_gateway: Gateway, idp: Idp, teams: Teams) -> None:
    gw = oidc_gateway
    bob = idp.access_token("bob")
    made = ok(gw, bob, "POST", "/admin/v1/keys", {"team": teams.red})
    gw.secrets_created.append(made["key"])
    service = idp.client_credentials()
    binding = gw.admin.call(
        "POST", "/admin/v1/role-bindings", {"user": "automation", "role": "team-admin", "team": teams.red}
    )
    try:
        by_service = ok(gw, service, "POST", "/admin/v1/keys", {"team": teams.red})
        gw.secrets_created.append(by_service["key"])
    finally:
        gw.admin.call("DELETE", f"/admin/v1/role-bindings/{binding['id']}")
    entries = gw.admin.call("GET", "/admin/v1/audit", team=teams.red)["data"]
    by_key = {e["key_id"]: e for e in entries if e["action"] == "key.created"}
    assert by_key[made["id"]]["actor"] == {
        "kind": "person",
        "sub": "bob",
        "email": "bob@example.test",
        "name": "Bob Lead",
        "issuer": idp.issuer,
    }
    assert by_key[by_service["id"]]["actor"] == {
        "kind": "service",
        "client_id": "automation",
        "issuer": idp.issuer,
    }
    team_created = next(e for e in entries if e["action"] == "team.created")
    assert team_created["actor"] == {"kind": "token"}
    bound = [e for e in entries if e["action"] == "role.bound"]
    assert bound
    assert all(e["actor"] == {"kind": "token"} for e in bound)
    assert all(e["peer"] == "127.0.0.1" for e in entries)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"group": "g", "role": "owner"}, "role"),
        ({"group": "g", "role": "team-admin"}, "team"),
        ({"group": "g", "role": "team-viewer", "team": "no-such-team-anywhere"}, "team"),
        ({"group": "g", "role": "team-viewer", "team": "Not A Team"}, "team"),
        ({"group": "g", "role": "auditor", "team": "x"}, "team"),
        ({"role": "auditor"}, "group"),
        ({"group": "g", "user": "u", "role": "auditor"}, "group"),
        ({"user": "", "role": "auditor"}, "user"),
        ({"user": "a\u0000b", "role": "auditor"}, "user"),
        ({"group": ["g"], "role": "auditor"}, "group"),
    ],
)
def test_a_bad_binding_is_a_400_naming_the_field(
    oidc_gateway: Gateway, body: dict[str, Any], param: str
) -> None:
    status, result = answer(oidc_gateway, oidc_gateway.admin_token, "POST", "/admin/v1/role-bindings", body)
    assert status == 400, result
    assert result["error"]["param"] == param


def test_binding_twice_finds_the_first_and_unknown_ids_are_404(oidc_gateway: Gateway) -> None:
    admin = oidc_gateway.admin
    first = admin.call(
        "POST", "/admin/v1/role-bindings", {"group": "g-" + secrets.token_hex(3), "role": "auditor"}
    )
    body = {"group": first["group"], "role": "auditor"}
    status, again = answer(oidc_gateway, oidc_gateway.admin_token, "POST", "/admin/v1/role-bindings", body)
    assert (status, again["id"]) == (200, first["id"])
    admin.call("DELETE", f"/admin/v1/role-bindings/{first['id']}")
    for binding_id in (first["id"], "rb_nope", "rb_0123456789abcdef"):
        status, result = answer(
            oidc_gateway, oidc_gateway.admin_token, "DELETE", f"/admin/v1/role-bindings/{binding_id}"
        )
        assert status == 404, result


def test_a_removed_binding_ends_access_on_every_replica_at_once(
    make_gateway: GatewayFactory, idp: Idp
) -> None:
    settings = oidc_settings(idp)
    with make_gateway(oidc=settings) as one, make_gateway(oidc=settings) as two:
        team = one.new_team()
        binding = one.admin.call(
            "POST",
            "/admin/v1/role-bindings",
            {"user": "dave@example.test", "role": "team-admin", "team": team},
        )
        dave = idp.access_token("dave")
        made = ok(two, dave, "POST", "/admin/v1/keys", {"team": team})
        two.secrets_created.append(made["key"])
        AdminClient(one.url, one.admin_token).call("DELETE", f"/admin/v1/role-bindings/{binding['id']}")
        # The very next call on the other replica: no cache outlives the removal.
        refused(two, dave, "POST", "/admin/v1/keys", {"team": team})
        # The key dave made keeps working: keys belong to teams.
        reply = two.client(made["key"]).chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.choices[0].message.content


def test_a_binding_does_not_survive_its_team_being_deleted_and_recreated(
    oidc_gateway: Gateway, idp: Idp
) -> None:
    gw = oidc_gateway
    team = gw.new_team()
    binding = gw.admin.call(
        "POST", "/admin/v1/role-bindings", {"group": "red-leads", "role": "team-admin", "team": team}
    )
    bob = idp.access_token("bob")
    made = ok(gw, bob, "POST", "/admin/v1/keys", {"team": team})
    gw.secrets_created.append(made["key"])
    gw.admin.call("DELETE", f"/admin/v1/teams/{team}")
    gw.admin.call("POST", "/admin/v1/teams", {"name": team})
    refused(gw, bob, "POST", "/admin/v1/keys", {"team": team})
    listed = gw.admin.call("GET", "/admin/v1/role-bindings", team=team)["data"]
    assert [(b["id"], b["active"]) for b in listed] == [(binding["id"], False)]
    gw.admin.call("DELETE", f"/admin/v1/role-bindings/{binding['id']}")
