"""The SCIM directory decides alongside the IdP's tokens, with the real OpenID provider signing
people in: a person deactivated or deleted by SCIM is refused on every replica at once though
their IdP token is still valid; a SCIM group grants its binding's role to a person whose token
carries no groups; deleting a person removes their user bindings, and the keys they created keep
working, still naming them in the audit log."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator

from tests.conftest import Gateway, GatewayFactory
from tests.identity.conftest import oidc_settings
from tests.identity.idp import Idp
from tests.identity.test_roles import answer, ok
from tests.scim.conftest import TOKEN, Scim, new_group, new_user, scim_of

PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"


@contextlib.contextmanager
def replicas(make_gateway: GatewayFactory, idp: Idp) -> Iterator[tuple[Gateway, Gateway]]:
    """Two gateways on one Redis, both trusting the provider and serving SCIM."""
    settings = oidc_settings(idp)
    with (
        make_gateway(oidc=settings, scim_token=TOKEN) as a,
        make_gateway(oidc=settings, scim_token=TOKEN) as b,
    ):
        yield a, b


def refused_401(gw: Gateway, token: str) -> str:
    status, body = answer(gw, token, "GET", "/admin/v1/me")
    assert status == 401, (status, body)
    message: str = body["error"]["message"]
    return message


def set_active(scim: Scim, user_id: str, active: bool) -> None:
    # Entra ID's soft delete, as it sends it.
    body = {"schemas": [PATCH], "Operations": [{"op": "Replace", "path": "active", "value": str(active)}]}
    assert scim.ok("PATCH", f"/Users/{user_id}", body)["active"] is active


def test_a_deactivated_person_with_a_still_valid_token_is_refused_on_every_replica(
    make_gateway: GatewayFactory, idp: Idp
) -> None:
    login = "dana-" + secrets.token_hex(3)
    token = idp.access_token(login)  # valid for the provider's lifetime, whatever SCIM says
    with replicas(make_gateway, idp) as (a, b):
        team = a.new_team()
        a.admin.call("POST", "/admin/v1/role-bindings", {"user": login, "role": "team-admin", "team": team})
        scim = scim_of(a)
        user = new_user(scim, externalId=login)  # Okta's and Entra's externalId: the person's subject
        for gw in (a, b):
            assert ok(gw, token, "GET", "/admin/v1/me")["roles"][0]["role"] == "team-admin"
        key = ok(a, token, "POST", "/admin/v1/keys", {"team": team, "name": "theirs"})
        a.secrets_created.append(key["key"])

        set_active(scim, user["id"], False)
        # The next call on either replica is refused: each reads the directory.
        for gw in (b, a):
            assert "deactivated in the company directory" in refused_401(gw, token)
        set_active(scim, user["id"], True)
        assert ok(b, token, "GET", "/admin/v1/me")["subject"] == login

        # Deleted: refused too, their user binding is gone, their key keeps working.
        scim.ok("DELETE", f"/Users/{user['id']}", status=204)
        for gw in (a, b):
            refused_401(gw, token)
        bindings = a.admin.call("GET", "/admin/v1/role-bindings")["data"]
        assert not [x for x in bindings if x.get("user") == login]
        assert [m.id for m in a.client(key["key"]).models.list().data]
        entries = a.admin.call("GET", f"/admin/v1/audit?team={team}")["data"]
        created = next(e for e in entries if e["action"] == "key.created")
        assert created["actor"]["sub"] == login
        unbound = next(e for e in entries if e["action"] == "role.unbound")
        assert unbound["actor"] == {"kind": "scim"}

        # Provisioned again (a rehire): the tombstone goes, the person is back, with no role yet.
        new_user(scim, externalId=login)
        assert ok(b, token, "GET", "/admin/v1/me")["roles"] == []


def test_a_scim_group_grants_its_bindings_role_to_a_person_whose_token_has_no_groups(
    make_gateway: GatewayFactory, idp: Idp
) -> None:
    login = "finn-" + secrets.token_hex(3)
    token = idp.access_token(login)  # an unknown login: the provider sends no groups at all
    group_name = "scim-auditors-" + secrets.token_hex(3)
    with replicas(make_gateway, idp) as (a, b):
        a.admin.call("POST", "/admin/v1/role-bindings", {"group": group_name, "role": "auditor"})
        assert ok(a, token, "GET", "/admin/v1/me")["groups"] == []
        status, _ = answer(a, token, "GET", "/admin/v1/audit")
        assert status == 403
        scim = scim_of(a)
        user = new_user(scim, externalId=login)
        # Entra ID sends a group's object id as its externalId: what its groups claim carries.
        object_id = "5f3ca4e1-" + secrets.token_hex(4)
        group = new_group(scim, user["id"], name=group_name, externalId=object_id)
        me = ok(b, token, "GET", "/admin/v1/me")
        assert me["groups"] == sorted([group_name, object_id])
        assert [r["role"] for r in me["roles"]] == ["auditor"]
        ok(b, token, "GET", "/admin/v1/audit")
        # Out of the group: out of the role, on the next call.
        remove = {
            "schemas": [PATCH],
            "Operations": [{"op": "remove", "path": f'members[value eq "{user["id"]}"]'}],
        }
        scim.ok("PATCH", f"/Groups/{group['id']}", remove)
        status, _ = answer(a, token, "GET", "/admin/v1/audit")
        assert status == 403


def test_a_person_is_matched_by_their_verified_email_and_never_by_an_unverified_one(
    make_gateway: GatewayFactory, idp: Idp
) -> None:
    group_name = "scim-by-email-" + secrets.token_hex(3)
    with replicas(make_gateway, idp) as (a, _b):
        scim = scim_of(a)
        # erin's email is verified; mallory claims carol's address unverified.
        erin = new_user(scim, userName="Erin@Example.test", emails=[])
        carol = new_user(scim, userName="carol@example.test", emails=[])
        new_group(scim, erin["id"], carol["id"], name=group_name)
        try:
            assert group_name in ok(a, idp.access_token("erin"), "GET", "/admin/v1/me")["groups"]
            assert group_name not in ok(a, idp.access_token("mallory"), "GET", "/admin/v1/me")["groups"]
            set_active(scim, carol["id"], False)
            refused_401(a, idp.access_token("carol"))
            # mallory is not carol: an unverified email names nobody.
            ok(a, idp.access_token("mallory"), "GET", "/admin/v1/me")
        finally:
            for user in (erin, carol):
                scim.ok("DELETE", f"/Users/{user['id']}", status=204)


def test_a_service_token_is_never_looked_up_in_the_directory(make_gateway: GatewayFactory, idp: Idp) -> None:
    with replicas(make_gateway, idp) as (a, _b):
        scim = scim_of(a)
        service = idp.client_credentials()
        me = ok(a, service, "GET", "/admin/v1/me")
        assert me["kind"] == "service"
        # A SCIM user named like the client, deactivated, changes nothing for the service.
        user = new_user(scim, externalId=me["subject"] or me["client_id"])
        set_active(scim, user["id"], False)
        assert ok(a, service, "GET", "/admin/v1/me")["kind"] == "service"
        scim.ok("DELETE", f"/Users/{user['id']}", status=204)
