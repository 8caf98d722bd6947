"""The chart's private entrance for the admin plane (docs/access.md): rendered only when asked, on
its own host, routing /admin and /scim from the admin port's Service only, while the public
entrance keeps routing the client APIs alone; and the IdP's settings reach the gateway, secrets by
reference."""

from __future__ import annotations

from typing import Any

from tests.chart.conftest import Renderer, gateway_env, rendered

OIDC: dict[str, Any] = {
    "issuer": "https://login.example.com/realms/corp",
    "clientId": "sluicegate-console",
    "clientSecret": {"existingSecret": "sluicegate-oidc"},
    "cliClientId": "sluicegate-cli",
    "subjectClaim": "oid",
    "platformAdminGroups": ["platform-team", "sre"],
    "sessionSecret": {"existingSecret": "sluicegate-sessions"},
}
ENTRANCE: dict[str, Any] = {
    "ingress": {"enabled": True, "hosts": ["llm.example.com"]},
    "adminIngress": {
        "enabled": True,
        "className": "nginx-internal",
        "host": "llm-admin.example.com",
        "tls": [{"secretName": "llm-admin-tls", "hosts": ["llm-admin.example.com"]}],
        "sourceRanges": ["10.0.0.0/8", "192.168.0.0/16"],
    },
}


def _paths(ingress: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {
        p["path"]: (p["backend"]["service"]["name"], p["backend"]["service"]["port"]["name"])
        for rule in ingress["spec"]["rules"]
        for p in rule["http"]["paths"]
    }


def test_no_admin_entrance_unless_asked(render: Renderer) -> None:
    result = rendered(render, values={"gateway": {"ingress": {"enabled": True}}})
    assert [i["metadata"]["name"] for i in result.of_kind("Ingress")] == ["sg-sluicegate"]
    assert "SLUICEGATE_PUBLIC_URL" not in gateway_env(result)
    assert not any(name.startswith("SLUICEGATE_OIDC") for name in gateway_env(result))


def test_the_admin_ingress_publishes_admin_and_scim_from_the_admin_port_on_its_own_host(
    render: Renderer,
) -> None:
    result = rendered(render, values={"gateway": ENTRANCE, "oidc": OIDC})
    ingresses = {i["metadata"]["name"]: i for i in result.of_kind("Ingress")}
    admin, public = ingresses["sg-sluicegate-admin"], ingresses["sg-sluicegate"]
    assert _paths(admin) == {
        "/admin": ("sg-sluicegate-admin", "admin"),
        "/scim": ("sg-sluicegate-admin", "admin"),
    }
    assert [r["host"] for r in admin["spec"]["rules"]] == ["llm-admin.example.com"]
    assert admin["spec"]["ingressClassName"] == "nginx-internal"
    assert admin["spec"]["tls"] == [{"secretName": "llm-admin-tls", "hosts": ["llm-admin.example.com"]}]
    assert admin["metadata"]["annotations"]["nginx.ingress.kubernetes.io/whitelist-source-range"] == (
        "10.0.0.0/8,192.168.0.0/16"
    )
    # The public entrance still routes the client APIs only.
    assert set(_paths(public)) == {"/v1", "/v1beta"}
    assert env_value(result, "SLUICEGATE_PUBLIC_URL") == "https://llm-admin.example.com"


def test_the_admin_httproute_publishes_the_same_paths(render: Renderer) -> None:
    values = {
        "gateway": {
            "adminHttpRoute": {
                "enabled": True,
                "hostname": "llm-admin.example.com",
                "parentRefs": [{"name": "internal"}],
            }
        }
    }
    result = rendered(render, values=values)
    (route,) = [r for r in result.of_kind("HTTPRoute") if r["metadata"]["name"] == "sg-sluicegate-admin"]
    assert route["spec"]["hostnames"] == ["llm-admin.example.com"]
    (rule,) = route["spec"]["rules"]
    assert [m["path"]["value"] for m in rule["matches"]] == ["/admin", "/scim"]
    assert rule["backendRefs"] == [{"name": "sg-sluicegate-admin", "port": 8081}]
    assert env_value(result, "SLUICEGATE_PUBLIC_URL") == "https://llm-admin.example.com"


def test_the_idp_settings_reach_the_gateway_with_secrets_by_reference(render: Renderer) -> None:
    result = rendered(render, values={"gateway": ENTRANCE, "oidc": OIDC})
    env = gateway_env(result)
    assert env_value(result, "SLUICEGATE_OIDC_ISSUER") == OIDC["issuer"]
    assert env_value(result, "SLUICEGATE_OIDC_CLIENT_ID") == "sluicegate-console"
    assert env_value(result, "SLUICEGATE_OIDC_CLI_CLIENT_ID") == "sluicegate-cli"
    assert env_value(result, "SLUICEGATE_OIDC_SUBJECT_CLAIM") == "oid"
    assert env_value(result, "SLUICEGATE_PLATFORM_ADMIN_GROUPS") == "platform-team,sre"
    assert env["SLUICEGATE_OIDC_CLIENT_SECRET"]["valueFrom"]["secretKeyRef"] == {
        "name": "sluicegate-oidc",
        "key": "client-secret",
    }
    assert env["SLUICEGATE_SESSION_SECRET"]["valueFrom"]["secretKeyRef"] == {
        "name": "sluicegate-sessions",
        "key": "session-secret",
    }
    # No secret value anywhere in the rendered objects: only references.
    assert not [s for s in result.of_kind("Secret") if "client-secret" in s.get("data", {})]


def env_value(result: Any, name: str) -> str:
    value: str = gateway_env(result)[name]["value"]
    return value
