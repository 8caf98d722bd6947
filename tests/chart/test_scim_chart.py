"""The IdP's SCIM token reaches the gateway from a Secret of the user's, by reference only; without
one, SCIM stays off (no SLUICEGATE_SCIM_TOKEN at all)."""

from __future__ import annotations

from tests.chart.conftest import Renderer, gateway_env, rendered


def test_the_scim_token_comes_from_a_secret_by_reference(render: Renderer) -> None:
    values = {
        "oidc": {
            "issuer": "https://login.example.com",
            "audience": "sluicegate-admin",
            "scimToken": {"existingSecret": "idp-scim"},
        }
    }
    env = gateway_env(rendered(render, values=values))
    assert env["SLUICEGATE_SCIM_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "idp-scim",
        "key": "scim-token",
    }
    assert "value" not in env["SLUICEGATE_SCIM_TOKEN"]


def test_no_scim_token_unless_asked(render: Renderer) -> None:
    env = gateway_env(
        rendered(
            render, values={"oidc": {"issuer": "https://login.example.com", "audience": "sluicegate-admin"}}
        )
    )
    assert "SLUICEGATE_SCIM_TOKEN" not in env
