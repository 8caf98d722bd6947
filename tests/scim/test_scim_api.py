"""/scim/v2 as an IdP meets it: its own token, SCIM's error envelope for every bad input (never
a 500), uniqueness, filters answered from indexes, pages, a bounded member list, and an audit
entry with actor `scim` for every change. Each test runs on one Redis and on a Redis Cluster (the
directory's scripts keep to one hash slot)."""

from __future__ import annotations

import secrets
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.cli import cli_env, run_cli
from tests.conftest import Gateway, GatewayFactory
from tests.scim.conftest import Scim, new_group, new_user

pytestmark = pytest.mark.also_on_cluster
PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
USER = "urn:ietf:params:scim:schemas:core:2.0:User"


def query(**params: Any) -> str:
    return "?" + urllib.parse.urlencode(params, quote_via=urllib.parse.quote)


def test_a_wrong_token_is_a_401_and_a_guessing_address_is_throttled(make_gateway: GatewayFactory) -> None:
    with make_gateway(scim_token="s" * 40, admin_max_failures=3) as gw:
        scim = Scim(gw.url, token="s" * 40)
        gw.secrets_created.append("s" * 40)
        for token in ("wrong-token", "", gw.admin_token):  # the admin token opens no SCIM door
            error = scim.error("GET", "/Users", status=401, token=token)
            assert "SCIM token" in error["detail"]
        error = scim.error("GET", "/Users", status=429, token="still-wrong")
        assert "Too many wrong SCIM tokens" in error["detail"]
        # The right token is never refused, even from a locked-out address.
        assert scim.ok("GET", "/Users")["schemas"] == ["urn:ietf:params:scim:api:messages:2.0:ListResponse"]


def test_scim_is_off_without_its_token(gateway: Gateway) -> None:
    error = Scim(gateway.url).error("GET", "/Users", status=403, token="anything")
    assert "SLUICEGATE_SCIM_TOKEN" in error["detail"]


def test_bad_input_gets_scim_errors_never_a_500(scim: Scim) -> None:
    assert scim.error("POST", "/Users", raw=b"{not json")["scimType"] == "invalidSyntax"
    assert scim.error("POST", "/Users", raw=b"[1, 2]")["scimType"] == "invalidSyntax"
    unknown = scim.error("POST", "/Users", {"schemas": [USER], "userName": "x@example.com", "shoeSize": 44})
    assert unknown["scimType"] == "invalidValue"
    assert "shoeSize" in unknown["detail"]
    assert scim.error("POST", "/Users", {"schemas": [USER], "active": True})["status"] == "400"  # no userName
    assert scim.error("GET", "/Users" + query(filter='userName eq "x'))["scimType"] == "invalidFilter"
    assert scim.error("GET", "/Users" + query(filter='shoeSize eq "44"'))["scimType"] == "invalidFilter"
    # A filter no index answers would need every user read: refused, not scanned.
    assert scim.error("GET", "/Users" + query(filter='title sw "Eng"'))["scimType"] == "invalidFilter"
    patch = {"schemas": [PATCH], "Operations": [{"op": "replace", "path": "active", "value": False}]}
    missing = scim.error("PATCH", "/Users/" + "0" * 32, patch, status=404)
    assert "No user" in missing["detail"]
    scim.error("GET", "/Groups/nope", status=404)
    scim.error("DELETE", "/Users/nope", status=404)
    scim.error(
        "PATCH",
        "/Groups/nope",
        {"schemas": [PATCH], "Operations": [{"op": "add", "path": "members", "value": []}]},
        status=404,
    )
    bad_op = {"schemas": [PATCH], "Operations": [{"op": "explode", "path": "active"}]}
    user = new_user(scim)
    assert scim.error("PATCH", f"/Users/{user['id']}", bad_op)["status"] == "400"
    assert scim.error("PUT", "/ServiceProviderConfig", {}, status=405)["status"] == "405"
    assert scim.error("GET", "/Elsewhere", status=404)["detail"].startswith("No SCIM endpoint")


def test_a_second_user_with_the_same_user_name_is_a_uniqueness_409(scim: Scim) -> None:
    user = new_user(scim)
    body = {"schemas": [USER], "userName": user["userName"].upper()}  # userName is case-insensitive
    assert scim.error("POST", "/Users", body, status=409)["scimType"] == "uniqueness"
    other = new_user(scim, externalId="ext-" + secrets.token_hex(4))
    clash = {"schemas": [USER], "userName": "z-" + user["userName"], "externalId": other["externalId"]}
    assert "externalId" in scim.error("POST", "/Users", clash, status=409)["detail"]
    # A replace that takes another user's name is refused too, and changes nothing.
    taken = {"schemas": [USER], "userName": other["userName"]}
    scim.error("PUT", f"/Users/{user['id']}", taken, status=409)
    assert scim.ok("GET", f"/Users/{user['id']}")["userName"] == user["userName"]
    # Its old name is free once it changed.
    renamed = {"schemas": [USER], "userName": "renamed-" + user["userName"]}
    scim.ok("PUT", f"/Users/{user['id']}", renamed)
    new_user(scim, userName=user["userName"])
    group = new_group(scim)
    again = {"schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"], "displayName": group["displayName"]}
    assert scim.error("POST", "/Groups", again, status=409)["scimType"] == "uniqueness"


def test_filters_are_answered_from_indexes_with_and(scim: Scim) -> None:
    ext = "ext-" + secrets.token_hex(4)
    user = new_user(scim, externalId=ext)
    found = scim.ok("GET", "/Users" + query(filter=f'userName eq "{user["userName"].upper()}"'))
    assert [u["id"] for u in found["Resources"]] == [user["id"]]
    found = scim.ok("GET", "/Users" + query(filter=f'externalId eq "{ext}" and active eq true'))
    assert found["totalResults"] == 1
    assert (
        scim.ok("GET", "/Users" + query(filter=f'externalId eq "{ext}" and active eq false'))["totalResults"]
        == 0
    )
    assert (
        scim.ok("GET", "/Users" + query(filter=f'externalId eq "{ext.upper()}"'))["totalResults"] == 0
    )  # caseExact
    assert scim.ok("GET", "/Users" + query(filter='userName eq "nobody@example.com"')) == {
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:ListResponse"],
        "totalResults": 0,
        "startIndex": 1,
        "itemsPerPage": 0,
        "Resources": [],
    }
    group = new_group(scim, user["id"])
    found = scim.ok(
        "GET",
        "/Groups" + query(filter=f'displayName eq "{group["displayName"]}"', excludedAttributes="members"),
    )
    assert [g["id"] for g in found["Resources"]] == [group["id"]]
    assert "members" not in found["Resources"][0]
    # Entra ID's membership check.
    check = f'id eq "{group["id"]}" and members eq "{user["id"]}"'
    assert scim.ok("GET", "/Groups" + query(filter=check, excludedAttributes="members"))["totalResults"] == 1
    check = f'id eq "{group["id"]}" and members eq "{"f" * 32}"'
    assert scim.ok("GET", "/Groups" + query(filter=check))["totalResults"] == 0


def test_pages_follow_start_index_and_count(make_gateway: GatewayFactory) -> None:
    from gateway.dev.embedded_redis import EmbeddedRedis

    with EmbeddedRedis() as redis, make_gateway(redis_url=redis.url, scim_token="p" * 40) as gw:
        gw.secrets_created.append("p" * 40)
        scim = Scim(gw.url, token="p" * 40)
        ids = {new_user(scim)["id"] for _ in range(7)}
        seen: list[str] = []
        for start in (1, 4, 7):
            page = scim.ok("GET", "/Users" + query(startIndex=start, count=3))
            assert page["totalResults"] == 7
            assert page["startIndex"] == start
            seen += [u["id"] for u in page["Resources"]]
        assert len(seen) == 7
        assert set(seen) == ids
        assert scim.ok("GET", "/Users" + query(startIndex=1, count=0))["itemsPerPage"] == 0
        # Okta's connection test, as it sends it.
        assert scim.ok("GET", "/Users" + query(startIndex=1, count=2))["itemsPerPage"] == 2
        assert scim.ok("GET", "/Groups" + query(startIndex=1, count=100))["totalResults"] == 0


def test_a_huge_member_list_is_refused_past_the_cap(scim: Scim) -> None:
    members = [{"value": f"{i:032x}"} for i in range(10_001)]
    body = {
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"],
        "displayName": "huge",
        "members": members,
    }
    error = scim.error("POST", "/Groups", body)
    assert error["scimType"] == "invalidValue"
    assert "10000 members" in error["detail"]
    group = new_group(scim)
    patch = {"schemas": [PATCH], "Operations": [{"op": "add", "path": "members", "value": members}]}
    assert scim.error("PATCH", f"/Groups/{group['id']}", patch)["scimType"] == "invalidValue"
    # A member that is no user of the directory is refused too, and the group is left as it was.
    error = scim.error("POST", "/Groups", {**body, "displayName": "ghosts", "members": members[:1]})
    assert "provision the user first" in error["detail"]
    assert scim.ok("GET", "/Groups" + query(filter='displayName eq "ghosts"'))["totalResults"] == 0


def test_every_change_is_audited_with_actor_scim(scim_gateway: Gateway, scim: Scim) -> None:
    user = new_user(scim)
    group = new_group(scim, user["id"])
    deactivate = {"schemas": [PATCH], "Operations": [{"op": "replace", "value": {"active": False}}]}
    scim.ok("PATCH", f"/Users/{user['id']}", deactivate)
    scim.ok("DELETE", f"/Groups/{group['id']}", status=204)
    scim.ok("DELETE", f"/Users/{user['id']}", status=204)
    entries = scim_gateway.admin.call("GET", "/admin/v1/audit?limit=20")["data"]
    mine = [e for e in entries if e["actor"] == {"kind": "scim"}]
    actions = [e["action"] for e in mine]
    for action in (
        "scim.user.created",
        "scim.group.created",
        "scim.user.patched",
        "scim.group.deleted",
        "scim.user.deleted",
    ):
        assert action in actions, actions
    patched = next(e for e in mine if e["action"] == "scim.user.patched")
    assert patched["changes"]["active"] == [True, False]


def test_concurrent_patches_of_one_user_lose_no_update(scim: Scim) -> None:
    user = new_user(scim)

    def patch(path: str) -> None:
        for i in range(30):
            body = {"schemas": [PATCH], "Operations": [{"op": "replace", "path": path, "value": f"v{i}"}]}
            scim.ok("PATCH", f"/Users/{user['id']}", body)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(patch, ["title", "nickName"]))
    final = scim.ok("GET", f"/Users/{user['id']}")
    assert (final["title"], final["nickName"]) == ("v29", "v29")


def test_the_cli_names_scim_as_the_actor(scim_gateway: Gateway, scim: Scim) -> None:
    user = new_user(scim)
    scim.ok("DELETE", f"/Users/{user['id']}", status=204)
    env = cli_env(scim_gateway.url, SLUICEGATE_ADMIN_TOKEN=scim_gateway.admin_token)
    table = run_cli(env, "audit", "--limit", "2")
    assert table.returncode == 0, table.stderr
    deleted = next(line for line in table.stdout.splitlines() if "scim.user.deleted" in line)
    assert deleted.split()[1] == "SCIM"


def test_locations_name_the_public_url_when_set(make_gateway: GatewayFactory) -> None:
    with make_gateway(scim_token="l" * 40, public_url="https://llm-admin.example.com") as gw:
        gw.secrets_created.append("l" * 40)
        scim = Scim(gw.url, token="l" * 40)
        user = new_user(scim)
        assert user["meta"]["location"] == f"https://llm-admin.example.com/scim/v2/Users/{user['id']}"


def test_redis_down_is_a_503_in_scims_envelope(make_gateway: GatewayFactory) -> None:
    with make_gateway(redis_url="redis://127.0.0.1:9/0", scim_token="r" * 40, redis_timeout_s=0.5) as gw:
        gw.secrets_created.append("r" * 40)
        scim = Scim(gw.url, token="r" * 40)
        assert "Redis is unavailable" in scim.error("GET", "/Users", status=503)["detail"]
        user = {"schemas": [USER], "userName": "x@example.com"}
        assert scim.error("POST", "/Users", user, status=503)["status"] == "503"
