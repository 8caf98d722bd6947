"""Okta's and Microsoft Entra ID's provisioning, replayed as their documentation shows them sending
it: the bodies, the capitalised ops, the string booleans, the no-path replace, the membership
paths. Each step checks what the IdP reads back.

Okta: https://developer.okta.com/docs/api/openapi/okta-scim/guides/scim-20 (connection test,
user and group lifecycle). Entra ID: https://learn.microsoft.com/en-us/entra/identity/
app-provisioning/use-scim-to-provision-users-and-groups (the request/response walkthrough).
"""

from __future__ import annotations

import secrets
import urllib.parse
from typing import Any

from tests.scim.conftest import Scim

PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
ENTERPRISE = "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"


def q(path: str, **params: Any) -> str:
    return path + "?" + urllib.parse.urlencode(params, quote_via=urllib.parse.quote)


def test_okta_provisions_updates_deactivates_and_pushes_groups(scim: Scim) -> None:
    login = f"isaac.brock.{secrets.token_hex(3)}@example.com"
    okta_id = "00ujl29u0le5" + secrets.token_hex(4)  # Okta's user id: its externalId
    # The connection test: constant parameters.
    assert scim.ok("GET", q("/Users", startIndex=1, count=2))["startIndex"] == 1
    assert scim.ok("GET", q("/Groups", startIndex=1, count=100))["schemas"] == [
        "urn:ietf:params:scim:api:messages:2.0:ListResponse"
    ]
    # Is the person there already?
    empty = scim.ok("GET", q("/Users", filter=f'userName eq "{login}"', startIndex=1, count=100))
    assert empty["totalResults"] == 0
    created = scim.ok(
        "POST",
        "/Users",
        {
            "schemas": [USER],
            "userName": login,
            "name": {"givenName": "Isaac", "familyName": "Brock"},
            "emails": [{"primary": True, "value": login, "type": "work"}],
            "displayName": "Isaac Brock",
            "locale": "en-US",
            "externalId": okta_id,
            "groups": [],
            "password": "1mz050nq",
            "active": True,
        },
        status=201,
    )
    assert created["active"] is True
    assert "password" not in created  # returned never, and never stored
    user_id = created["id"]
    found = scim.ok("GET", q("/Users", filter=f'userName eq "{login}"', startIndex=1, count=100))
    assert [u["id"] for u in found["Resources"]] == [user_id]
    # AIW integrations update with PUT: the whole object, `active` as sent.
    replaced = scim.ok(
        "PUT",
        f"/Users/{user_id}",
        {
            "schemas": [USER],
            "id": user_id,
            "userName": login,
            "name": {"givenName": "Another", "familyName": "Brock"},
            "emails": [{"primary": True, "value": login, "type": "work"}],
            "active": True,
            "externalId": okta_id,
        },
    )
    assert replaced["name"]["givenName"] == "Another"
    # Deactivation, OIN template style: a replace with no path.
    off = {"schemas": [PATCH], "Operations": [{"op": "replace", "value": {"active": False}}]}
    assert scim.ok("PATCH", f"/Users/{user_id}", off)["active"] is False
    assert scim.ok("GET", f"/Users/{user_id}")["active"] is False
    on = {"schemas": [PATCH], "Operations": [{"op": "replace", "value": {"active": True}}]}
    assert scim.ok("PATCH", f"/Users/{user_id}", on)["active"] is True

    # Group push.
    name = f"Test SCIMv2 {secrets.token_hex(3)}"
    group = scim.ok("POST", "/Groups", {"schemas": [GROUP], "displayName": name, "members": []}, status=201)
    group_id = group["id"]
    add = {
        "schemas": [PATCH],
        "Operations": [{"op": "add", "path": "members", "value": [{"value": user_id, "display": login}]}],
    }
    members = scim.ok("PATCH", f"/Groups/{group_id}", add)["members"]
    assert [(m["value"], m["display"]) for m in members] == [(user_id, login)]
    assert [g["display"] for g in scim.ok("GET", f"/Users/{user_id}")["groups"]] == [name]
    rename = {
        "schemas": [PATCH],
        "Operations": [{"op": "replace", "value": {"id": group_id, "displayName": name + " renamed"}}],
    }
    renamed = scim.ok("PATCH", f"/Groups/{group_id}", rename)
    assert renamed["displayName"] == name + " renamed"
    assert [m["value"] for m in renamed["members"]] == [user_id]  # a rename keeps the members
    remove = {"schemas": [PATCH], "Operations": [{"op": "remove", "path": f'members[value eq "{user_id}"]'}]}
    assert "members" not in scim.ok("PATCH", f"/Groups/{group_id}", remove)
    assert "groups" not in scim.ok("GET", f"/Users/{user_id}")
    scim.ok("DELETE", f"/Groups/{group_id}", status=204)
    scim.error("GET", f"/Groups/{group_id}", status=404)


def test_entra_id_provisions_with_its_own_dialect(scim: Scim) -> None:
    suffix = secrets.token_hex(4)
    user_name = f"Test_User_{suffix}"
    external_id = f"0a21f0f2-8d2a-4f8e-bf98-{suffix}"
    assert scim.ok("GET", q("/Users", filter=f'userName eq "{user_name}"'))["totalResults"] == 0
    created = scim.ok(
        "POST",
        "/Users",
        {
            "schemas": [USER, ENTERPRISE],
            "externalId": external_id,
            "userName": user_name,
            "active": True,
            "emails": [{"primary": True, "type": "work", "value": f"Test_User_{suffix}@testuser.com"}],
            "meta": {"resourceType": "User"},
            "name": {
                "formatted": "givenName familyName",
                "familyName": "familyName",
                "givenName": "givenName",
            },
            "roles": [],
            ENTERPRISE: {"department": "Research", "employeeNumber": "42"},
        },
        status=201,
    )
    user_id = created["id"]
    assert created[ENTERPRISE]["department"] == "Research"
    found = scim.ok("GET", q("/Users", filter=f'externalId eq "{external_id}"'))
    assert [u["id"] for u in found["Resources"]] == [user_id]
    update = {
        "schemas": [PATCH],
        "Operations": [
            {"op": "Replace", "path": 'emails[type eq "work"].value', "value": "updatedEmail@example.com"},
            {"op": "Replace", "path": "name.familyName", "value": "updatedFamilyName"},
            {"op": "Replace", "path": f"{ENTERPRISE}:department", "value": "Sales"},
        ],
    }
    updated = scim.ok("PATCH", f"/Users/{user_id}", update)
    assert updated["emails"][0]["value"] == "updatedEmail@example.com"
    assert updated["name"]["familyName"] == "updatedFamilyName"
    assert updated[ENTERPRISE]["department"] == "Sales"
    # Soft delete: capitalised op, boolean as a string.
    disable = {"schemas": [PATCH], "Operations": [{"op": "Replace", "path": "active", "value": "False"}]}
    assert scim.ok("PATCH", f"/Users/{user_id}", disable)["active"] is False
    enable = {"schemas": [PATCH], "Operations": [{"op": "Replace", "path": "active", "value": "True"}]}
    assert scim.ok("PATCH", f"/Users/{user_id}", enable)["active"] is True

    name = f"displayName-{suffix}"
    missing = scim.ok("GET", q("/Groups", excludedAttributes="members", filter=f'displayName eq "{name}"'))
    assert missing["totalResults"] == 0
    group = scim.ok(
        "POST",
        "/Groups",
        {
            "schemas": [GROUP],
            "externalId": f"8aa1a0c0-c4c3-4bc0-{suffix}",
            "displayName": name,
            "meta": {"resourceType": "Group"},
        },
        status=201,
    )
    group_id = group["id"]
    assert scim.ok("GET", q(f"/Groups/{group_id}", excludedAttributes="members"))["displayName"] == name
    add = {
        "schemas": [PATCH],
        "Operations": [{"op": "Add", "path": "members", "value": [{"$ref": None, "value": user_id}]}],
    }
    scim.ok("PATCH", f"/Groups/{group_id}", add)
    check = f'id eq "{group_id}" and members eq "{user_id}"'
    assert scim.ok("GET", q("/Groups", excludedAttributes="members", filter=check))["totalResults"] == 1
    remove = {
        "schemas": [PATCH],
        "Operations": [{"op": "Remove", "path": "members", "value": [{"$ref": None, "value": user_id}]}],
    }
    scim.ok("PATCH", f"/Groups/{group_id}", remove)
    assert scim.ok("GET", q("/Groups", excludedAttributes="members", filter=check))["totalResults"] == 0
    rename = {
        "schemas": [PATCH],
        "Operations": [{"op": "Replace", "path": "displayName", "value": name + "-new"}],
    }
    assert scim.ok("PATCH", f"/Groups/{group_id}", rename)["displayName"] == name + "-new"
    # Hard delete, 30 days later.
    scim.ok("DELETE", f"/Groups/{group_id}", status=204)
    scim.ok("DELETE", f"/Users/{user_id}", status=204)
    scim.error("GET", f"/Users/{user_id}", status=404)
    assert scim.ok("GET", q("/Users", filter=f'userName eq "{user_name}"'))["totalResults"] == 0
