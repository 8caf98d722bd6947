"""A person signed in to the console through the IdP, then deactivated or deleted by SCIM: their
session ends at their next request, on either replica, and a SCIM group's binding shows in the
console for a person whose token carries no groups. The real OpenID provider's own pages in a
real Chromium, two replicas on one Redis."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from playwright.sync_api import BrowserContext, expect

from tests.conftest import Gateway, GatewayFactory
from tests.console.test_sso import UI, _offline_only, _sign_in_with_idp
from tests.identity.conftest import console_replicas
from tests.identity.idp import Idp
from tests.scim.conftest import TOKEN, Scim, new_group, new_user, scim_of

PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"


@dataclass
class Replicas:
    idp: Idp
    one: Gateway
    two: Gateway
    scim: Scim


@pytest.fixture(scope="module")
def replicas(make_gateway_module: GatewayFactory) -> Iterator[Replicas]:
    with console_replicas(make_gateway_module, scim_token=TOKEN) as (idp, one, two):
        yield Replicas(idp, one, two, scim_of(one))


def test_deactivation_ends_a_console_session_on_every_replica(
    context: BrowserContext, replicas: Replicas
) -> None:
    login = "gwen-" + secrets.token_hex(3)
    team = replicas.one.new_team()
    replicas.one.admin.call(
        "POST", "/admin/v1/role-bindings", {"user": login, "role": "team-admin", "team": team}
    )
    user = new_user(replicas.scim, externalId=login)
    page = context.new_page()
    _offline_only(page)
    _sign_in_with_idp(page, replicas.one, login)
    expect(page.locator("#who")).to_contain_text(f"team-admin of {team}")
    page.goto(f"{replicas.two.url}{UI}/teams")
    expect(page.locator("h1")).to_have_text("Teams")

    off = {"schemas": [PATCH], "Operations": [{"op": "replace", "value": {"active": False}}]}
    replicas.scim.ok("PATCH", f"/Users/{user['id']}", off)
    page.goto(f"{replicas.two.url}{UI}/teams")
    expect(page.locator("h1")).to_have_text("Sign in")
    # Ended, not paused: reactivated, the old cookie still signs nobody in.
    on = {"schemas": [PATCH], "Operations": [{"op": "replace", "value": {"active": True}}]}
    replicas.scim.ok("PATCH", f"/Users/{user['id']}", on)
    page.goto(f"{replicas.one.url}{UI}/teams")
    expect(page.locator("h1")).to_have_text("Sign in")


def test_deletion_ends_a_console_session(context: BrowserContext, replicas: Replicas) -> None:
    login = "hugo-" + secrets.token_hex(3)
    user = new_user(replicas.scim, externalId=login)
    page = context.new_page()
    _offline_only(page)
    _sign_in_with_idp(page, replicas.one, login)
    expect(page.locator("h1")).to_have_text("You are signed in, with no role")
    replicas.scim.ok("DELETE", f"/Users/{user['id']}", status=204)
    page.goto(f"{replicas.one.url}{UI}/")
    expect(page.locator("h1")).to_have_text("Sign in")


def test_a_scim_group_gives_a_console_role_to_a_token_without_groups(
    context: BrowserContext, replicas: Replicas
) -> None:
    login = "ines-" + secrets.token_hex(3)
    group_name = "scim-console-" + secrets.token_hex(3)
    team = replicas.one.new_team()
    replicas.one.admin.call(
        "POST", "/admin/v1/role-bindings", {"group": group_name, "role": "team-viewer", "team": team}
    )
    user = new_user(replicas.scim, externalId=login)
    new_group(replicas.scim, user["id"], name=group_name)
    page = context.new_page()
    _offline_only(page)
    _sign_in_with_idp(page, replicas.two, login)
    expect(page.locator("#who")).to_contain_text(f"team-viewer of {team}")
