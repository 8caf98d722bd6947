"""Monitoring objects: the custom resources are well formed (no schema for them ships with
kubernetes-validate), every PromQL expression parses (promtool), and the dashboard and alerts use
only metric names that a running gateway and a worker actually export."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.cases import CASES, KEDA
from tests.chart.conftest import CHART, NAMESPACE, Manifest, Render, Renderer, rendered

MONITORING = CASES["monitoring"][1]
METRIC_RE = re.compile(r"\b(?:sluicegate_[a-z0-9_]+|vllm:[a-z0-9_:]+)")
# Grafana's variables, replaced by what Prometheus would see, so the expressions parse on their own.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "1h", "$namespace": ".*", "$model": ".*"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "dashboards" / "sluicegate.json").read_text())
    return loaded


def dashboard_exprs() -> list[str]:
    exprs = []
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            exprs.append(expr)
    return exprs


def rule_exprs(render: Renderer) -> list[str]:
    rule = rendered(render, values=MONITORING).one("PrometheusRule")
    return [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]


def test_service_monitors_select_the_gateway_and_worker_services(render: Renderer) -> None:
    result = rendered(render, *CASES["gpu-cluster"][0])
    monitors = result.of_kind("ServiceMonitor")
    assert len(monitors) == 2
    for monitor in monitors:
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        spec = monitor["spec"]
        assert spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        (endpoint,) = spec["endpoints"]
        assert endpoint["path"] == "/metrics"
        selected = [
            s
            for s in result.of_kind("Service")
            if spec["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
        ]
        assert selected, monitor["metadata"]["name"]
        for service in selected:
            assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert not rendered(render).of_kind("ServiceMonitor")


def test_prometheus_rule_has_the_alerts(render: Renderer) -> None:
    rule = rendered(render, values=MONITORING).one("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    (group,) = rule["spec"]["groups"]
    alerts = {r["alert"]: r for r in group["rules"]}
    assert {
        "SluicegateHighErrorRate",
        "SluicegateNoHealthyEndpoints",
        "SluicegateRedisDown",
        "SluicegateQueueWaitHigh",
        "SluicegateDiscoveryDown",
    } <= set(alerts)
    for alert in alerts.values():
        assert alert["expr"].strip()
        assert alert["labels"]["severity"] in {"warning", "critical"}
        assert alert["annotations"]["summary"]
        assert alert["annotations"]["description"]
    assert "sluicegate_redis_up" in alerts["SluicegateRedisDown"]["expr"]
    assert "sluicegate_pool_healthy_endpoints" in alerts["SluicegateNoHealthyEndpoints"]["expr"]
    assert 'code=~"5.."' in alerts["SluicegateHighErrorRate"]["expr"]
    assert "sluicegate_queue_wait_seconds_bucket" in alerts["SluicegateQueueWaitHigh"]["expr"]
    assert "sluicegate_discovery_up" in alerts["SluicegateDiscoveryDown"]["expr"]


def test_scaled_objects_are_well_formed(render: Renderer) -> None:
    result = rendered(render, values=KEDA)
    deployments = {d["metadata"]["name"] for d in result.of_kind("Deployment")}
    for scaled in result.of_kind("ScaledObject"):
        assert scaled["apiVersion"] == "keda.sh/v1alpha1"
        spec = scaled["spec"]
        assert spec["scaleTargetRef"]["name"] in deployments
        assert 0 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
        for trigger in spec["triggers"]:
            assert trigger["type"] == "prometheus"
            meta = trigger["metadata"]
            # KEDA reads trigger metadata as strings only.
            assert all(isinstance(v, str) for v in meta.values())
            assert meta["serverAddress"].startswith("http")
            assert meta["query"]
            assert float(meta["threshold"]) > 0


def test_dashboard_configmap_is_labelled_for_the_grafana_sidecar(render: Renderer) -> None:
    result = rendered(render)
    (config_map,) = [c for c in result.of_kind("ConfigMap") if "grafana_dashboard" in c["metadata"]["labels"]]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["sluicegate.json"]) == dashboard()


def test_dashboard_has_the_panels_the_operators_need() -> None:
    board = dashboard()
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    text = json.dumps(panels)
    for metric in (
        "sluicegate_requests_total",
        "sluicegate_time_to_first_token_seconds_bucket",
        "sluicegate_time_per_output_token_seconds_bucket",
        "sluicegate_tokens_total",
        "sluicegate_rate_limited_total",
        "sluicegate_pool_queue_depth",
        "sluicegate_pool_healthy_endpoints",
        # Cost per team: tokens times the model table's prices, joined in the query.
        "sluicegate_model_price_per_token",
    ):
        assert metric in text, metric
    for quantile in ("0.5", "0.95", "0.99"):
        assert (
            f"histogram_quantile({quantile}, sum by (model, le) (rate(sluicegate_time_to_first_token" in text
        )
    assert all(t["datasource"]["uid"] == "${datasource}" for p in panels for t in p["targets"])


@pytest.fixture(scope="session")
def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool not found: install Debian's `prometheus` package (apt-get install prometheus)"
    return found


def check_rules(promtool: str, groups: list[dict[str, Any]], tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    done = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_alert_rules_pass_promtool(render: Renderer, promtool: str, tmp_path: Path) -> None:
    rule = rendered(render, values=MONITORING).one("PrometheusRule")
    check_rules(promtool, rule["spec"]["groups"], tmp_path)


def test_dashboard_queries_parse(promtool: str, tmp_path: Path) -> None:
    rules = [{"record": f"dashboard:expr_{i}", "expr": expr} for i, expr in enumerate(dashboard_exprs())]
    check_rules(promtool, [{"name": "dashboard", "rules": rules}], tmp_path)


def exported_names(url: str) -> set[str]:
    """Every sample name the endpoint exports, from its `# TYPE` lines (families are listed even
    before their first sample)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:  # noqa: S310 -- a loopback test server
        text = resp.read().decode()
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            suffixes = ("_bucket", "_sum", "_count") if kind == "histogram" else ("",)
            names |= {name + s for s in suffixes}
    return names


def used_names(render: Renderer, result: Render | None = None) -> set[str]:
    keda = result or rendered(render, values=KEDA)
    queries = [t["metadata"]["query"] for s in keda.of_kind("ScaledObject") for t in s["spec"]["triggers"]]
    return {
        m for expr in [*dashboard_exprs(), *rule_exprs(render), *queries] for m in METRIC_RE.findall(expr)
    }


def test_dashboard_and_alerts_use_only_exported_metrics(
    render: Renderer, gateway: Any, fake_worker: str
) -> None:
    exported = exported_names(gateway.url) | exported_names(fake_worker)
    missing = sorted(used_names(render) - exported)
    assert not missing, (
        f"used by the dashboard, alerts or KEDA but exported by no gateway or worker: {missing}"
    )


def manifest_names(objects: list[Manifest]) -> list[str]:
    return [o["metadata"]["name"] for o in objects]
