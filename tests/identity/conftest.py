"""The identity tests' real OpenID provider (tests/identity/idp.py) and gateways that trust it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.identity.oidc import OidcSettings
from tests.conftest import Gateway, GatewayFactory
from tests.identity.idp import AUDIENCE, CONSOLE, Idp

# Who signs in, and the groups their IdP says they are in.
USERS: dict[str, dict[str, Any]] = {
    "alice": {"email": "alice@example.test", "name": "Alice Admin", "groups": ["platform-admins"]},
    "bob": {"email": "bob@example.test", "name": "Bob Lead", "groups": ["red-leads"]},
    "carol": {"email": "Carol@Example.test", "name": "Carol Viewer", "groups": []},
    "dave": {"email": "dave@example.test", "name": "Dave Nobody", "groups": ["unrelated"]},
    "erin": {"email": "erin@example.test", "name": "Erin Auditor", "groups": []},
    "mallory": {"email": "carol@example.test", "email_verified": False, "name": "Mallory", "groups": []},
}
PLATFORM_GROUP = "platform-admins"


@pytest.fixture(scope="session")
def idp() -> Iterator[Idp]:
    with Idp(USERS) as provider:
        yield provider


def oidc_settings(idp: Idp, **overrides: Any) -> OidcSettings:
    fields: dict[str, Any] = {
        "issuer": idp.issuer,
        "audience": AUDIENCE,
        "platform_admin_groups": frozenset({PLATFORM_GROUP}),
        "clients": frozenset({"console", "sluicegate-cli"}),
    }
    return OidcSettings(**{**fields, **overrides})


@pytest.fixture
def oidc_gateway(make_gateway: GatewayFactory, idp: Idp) -> Iterator[Gateway]:
    """A gateway that takes the provider's access tokens, and its admin token (break-glass)."""
    with make_gateway(oidc=oidc_settings(idp)) as gw:
        yield gw


@contextlib.contextmanager
def tokens_only(make_gateway: GatewayFactory, idp: Idp, **oidc: Any) -> Iterator[Gateway]:
    """A gateway with OIDC and no admin token at all."""
    with make_gateway(oidc=oidc_settings(idp, **oidc), admin_token=None) as gw:
        yield gw


@contextlib.contextmanager
def console_replicas(make_gateway: GatewayFactory, **settings: Any) -> Iterator[tuple[Idp, Gateway, Gateway]]:
    """A provider of its own and two gateway replicas whose consoles sign people in with it (each
    replica's callback registered with the provider before it starts), sharing one Redis."""
    idp = Idp(USERS)
    fields: dict[str, Any] = {
        "oidc": oidc_settings(idp),
        "oidc_client_id": CONSOLE[0],
        "oidc_client_secret": CONSOLE[1],
        **settings,
    }
    with make_gateway(**fields) as one, make_gateway(**fields) as two:
        for gateway in (one, two):
            idp.also_redirect_to(f"{gateway.url}/admin/ui/oidc/callback")
        with idp:
            yield idp, one, two
