"""What the chart publishes and tells: the Ingress and the HTTPRoute route the client APIs only
(never /admin or /metrics), the log format and every per-model setting reach the gateway (whose own
parser reads the rendered table), vLLM models are native by default, and NOTES.txt names the
console, the CLI, the dashboard, the agents' guide and the image to build."""

from __future__ import annotations

import shutil
from decimal import Decimal
from typing import Any

import pytest
import yaml

from gateway.model_file import parse_model_table
from gateway.pricing import Price
from tests.chart.cases import NATIVE_MODELS, PUBLISHED
from tests.chart.conftest import CHART, NAMESPACE, RELEASE, Helm, Manifest, Renderer, gateway_env, rendered

CLIENT_PATHS = ["/v1", "/v1beta"]
SERVICE = f"{RELEASE}-sluicegate"


def model_table(result: Any) -> dict[str, Any]:
    config = next(c for c in result.of_kind("ConfigMap") if "models.yaml" in c["data"])
    table: dict[str, Any] = yaml.safe_load(config["data"]["models.yaml"])
    return table


def _paths_reach_the_service(paths: list[str], result: Any) -> None:
    assert paths == CLIENT_PATHS
    assert not any(p.startswith(("/admin", "/metrics")) or p == "/" for p in paths)
    service = result.one("Service", SERVICE)
    assert service["spec"]["ports"][0]["name"] == "http"


def test_ingress_publishes_the_client_apis_only(render: Renderer) -> None:
    result = rendered(render, values=PUBLISHED)
    ingress = result.one("Ingress")
    assert ingress["apiVersion"] == "networking.k8s.io/v1"
    spec = ingress["spec"]
    assert spec["ingressClassName"] == "nginx"
    assert spec["tls"] == PUBLISHED["gateway"]["ingress"]["tls"]
    assert ingress["metadata"]["annotations"] == {"nginx.ingress.kubernetes.io/proxy-buffering": "off"}
    assert [r["host"] for r in spec["rules"]] == ["llm.example.com", "llm.internal.example.com"]
    for rule in spec["rules"]:
        paths = rule["http"]["paths"]
        assert {p["pathType"] for p in paths} == {"Prefix"}
        assert {
            (p["backend"]["service"]["name"], p["backend"]["service"]["port"]["name"]) for p in paths
        } == {(SERVICE, "http")}
        _paths_reach_the_service([p["path"] for p in paths], result)


def test_ingress_without_hosts_answers_every_host(render: Renderer) -> None:
    ingress = rendered(render, values={"gateway": {"ingress": {"enabled": True}}}).one("Ingress")
    (rule,) = ingress["spec"]["rules"]
    assert "host" not in rule
    assert "ingressClassName" not in ingress["spec"]
    assert [p["path"] for p in rule["http"]["paths"]] == CLIENT_PATHS


def test_http_route_publishes_the_client_apis_only(render: Renderer) -> None:
    result = rendered(render, values=PUBLISHED)
    route = result.one("HTTPRoute")
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["metadata"]["namespace"] == NAMESPACE
    spec = route["spec"]
    assert spec["parentRefs"] == PUBLISHED["gateway"]["httpRoute"]["parentRefs"]
    assert spec["hostnames"] == ["llm.example.com"]
    (rule,) = spec["rules"]
    assert {m["path"]["type"] for m in rule["matches"]} == {"PathPrefix"}
    _paths_reach_the_service([m["path"]["value"] for m in rule["matches"]], result)
    assert rule["backendRefs"] == [{"name": SERVICE, "port": 80}]
    assert rule["timeouts"] == {"request": "3600s"}


def test_nothing_is_published_by_default(render: Renderer) -> None:
    result = rendered(render)
    assert not result.of_kind("Ingress")
    assert not result.of_kind("HTTPRoute")


def test_log_format_reaches_the_gateway(render: Renderer) -> None:
    assert gateway_env(rendered(render))["SLUICEGATE_LOG_FORMAT"]["value"] == "text"
    assert gateway_env(rendered(render, values=PUBLISHED))["SLUICEGATE_LOG_FORMAT"]["value"] == "json"


def test_every_model_setting_reaches_the_model_table_the_gateway_loads(render: Renderer) -> None:
    raw = model_table(rendered(render, values=NATIVE_MODELS))
    entries = {m["name"]: m for m in raw["models"]}
    qwen = entries["qwen3-32b"]
    given = NATIVE_MODELS["models"][0]
    for key in ("protocols", "max_output_tokens", "context_window", "default_max_tokens", "hosted_tools"):
        assert qwen[key] == given[key], key
    assert qwen["tokenize"] is True
    assert qwen["native_normalise"] is True
    assert "native_normalise" not in entries["reframr"]  # false is the default: left out
    assert "protocols" not in entries["reframr"]
    models = {m.name: m for m in parse_model_table(raw).models}
    assert models["qwen3-32b"].protocols.native("messages")
    assert models["qwen3-32b"].protocols.native("responses")
    assert models["remote"].protocols.native("responses")
    assert not models["remote"].protocols.native("messages")
    assert models["qwen3-32b"].hosted_tools == "refuse"
    # Prices stay the decimals that were written, strings or YAML numbers.
    assert models["qwen3-32b"].price == Price(Decimal("0.15"), Decimal("0.60"), "EUR")
    assert models["remote"].price == Price(Decimal(2), Decimal("0.5"), "EUR")
    assert models["canary"].price == Price(Decimal("0.1"), Decimal("0.3"), "EUR")
    assert models["reframr"].price is None


def test_the_default_vllm_model_is_served_natively(render: Renderer) -> None:
    (entry,) = model_table(rendered(render))["models"]
    assert entry["protocols"] == {"messages": "native", "responses": "native"}
    assert entry["tokenize"] is True
    assert entry["native_normalise"] is True  # Claude Code on vLLM's native Messages (docs/agents.md)


@pytest.fixture(scope="module")
def notes(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """NOTES.txt as `helm install` prints it. `helm template` renders no NOTES and `install
    --dry-run` wants a cluster, so a copy of the chart renders the same text through `tpl`."""
    chart = tmp_path_factory.mktemp("notes") / "sluicegate"
    shutil.copytree(CHART, chart)
    shutil.copy(CHART / "templates" / "NOTES.txt", chart / "notes.tpl")
    (chart / "templates" / "notes-probe.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes-probe}\n"
        'data:\n  notes: {{ tpl (.Files.Get "notes.tpl") . | toJson }}\n'
    )

    def render_notes(values: dict[str, Any] | None = None) -> str:
        path = chart.parent / "values.yaml"
        path.write_text(yaml.safe_dump(values or {}))
        args = ["template", RELEASE, str(chart), "-n", NAMESPACE, "-f", str(path)]
        done = helm.run(*args, "--show-only", "templates/notes-probe.yaml")
        assert done.returncode == 0, done.stderr
        probe: Manifest = yaml.safe_load(done.stdout)
        text: str = probe["data"]["notes"]
        return text

    return render_notes


def test_notes_name_the_console_cli_dashboard_agents_guide_and_image(notes: Any) -> None:
    text = notes()
    assert "/admin/ui/" in text
    assert f"kubectl -n {NAMESPACE} exec deploy/{SERVICE} -- sluicegate teams create my-team" in text
    # The admin plane is on its own port: the CLI and the console go through the admin Service.
    assert f"port-forward svc/{SERVICE}-admin 8081:8081" in text
    assert "export SLUICEGATE_URL=http://127.0.0.1:8081" in text
    assert "base_url=$SLUICEGATE_BASE/v1" in text
    assert "pip install ." in text
    assert f"ConfigMap {SERVICE}-dashboard" in text
    assert "docs/agents.md" in text
    # The default image exists once a release of this version does: until then, build and push it.
    assert "published by the project's release\n   workflow for each version tag" in text
    assert "\n   make image\n" in text
    push = "skopeo copy oci-archive:dist/sluicegate-gateway.oci.tar docker://REGISTRY/sluicegate:0.1.0"
    assert push in text
    assert "--set gateway.image.repository=REGISTRY/sluicegate" in text
    assert "sluicegate-reframr" not in text  # no Reframr model, no Reframr image to build
    assert "Ingress" not in text


def test_notes_follow_the_values(notes: Any) -> None:
    text = notes(
        {
            **PUBLISHED,
            "gateway": {
                **PUBLISHED["gateway"],
                "port": 9000,
                "adminPort": 0,  # the admin plane on the client port, as before the admin port
                "image": {"repository": "registry.example.com/llm/sluicegate", "tag": "0.1.0"},
                "spool": {"persistence": {"enabled": True}},
            },
            "monitoring": {"dashboard": {"enabled": False}},
        }
    )
    assert "make image" not in text  # an image of the user's own
    exec_line = f"exec statefulset/{SERVICE} -- env SLUICEGATE_URL=http://127.0.0.1:9000 sluicegate usage"
    assert exec_line in text
    assert "https://llm.example.com/v1 https://llm.internal.example.com/v1" in text
    assert "HTTPRoute" in text
    assert "the admin API, the console and /metrics are" in text
    assert "Grafana" not in text


def test_notes_tell_reframr_users_to_build_its_image_too(notes: Any) -> None:
    text = notes({"models": [{"name": "r", "engine": "reframr", "mode": "test"}]})
    assert text.count("dist/sluicegate-reframr.oci.tar -> engines.reframr.image.repository") == 1


def test_notes_say_what_to_register_at_the_idp(notes: Any) -> None:
    text = notes(
        {
            "gateway": {"adminIngress": {"enabled": True, "host": "llm-admin.example.com"}},
            "oidc": {
                "issuer": "https://login.example.com",
                "clientId": "console",
                "clientSecret": {"existingSecret": "oidc"},
                "cliClientId": "cli",
            },
        }
    )
    assert "redirect URI http://llm-admin.example.com/admin/ui/oidc/callback" in text
    assert 'the CLI\'s public client "cli" with the device grant' in text
    assert "WARNING: without gateway.adminIngress.tls people sign in over plain http." in text
    assert "People sign in with your identity provider" not in notes()
