"""The chart's side of per-team cache salts and the /metrics token (docs/prefix-routing.md): each
comes from a Secret the operator names, never one the chart generates (a render that cannot
`lookup` would re-roll it); the gateway's ServiceMonitor sends the metrics token."""

from __future__ import annotations

import yaml

from tests.chart.cases import CASES
from tests.chart.conftest import Renderer, gateway_env, rendered


def test_secrets_the_operator_names_reach_the_gateway_and_the_service_monitor(render: Renderer) -> None:
    values = {
        "cacheSalt": {"existingSecret": "salt", "key": "s"},
        "monitoring": {"metricsToken": {"existingSecret": "scrape", "key": "t"}},
    }
    result = rendered(render, *CASES["gpu-cluster"][0], values=values)
    env = gateway_env(result)
    salt = env["SLUICEGATE_CACHE_SALT_SECRET"]["valueFrom"]["secretKeyRef"]
    token = env["SLUICEGATE_METRICS_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert (salt, token) == ({"name": "salt", "key": "s"}, {"name": "scrape", "key": "t"})
    gateway_monitor = [m for m in result.of_kind("ServiceMonitor") if "worker" not in m["metadata"]["name"]]
    (endpoint,) = gateway_monitor[0]["spec"]["endpoints"]
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": {"name": "scrape", "key": "t"}}


def test_without_them_nothing_is_generated_and_a_models_isolation_reaches_the_table(
    render: Renderer,
) -> None:
    models = [
        {"name": "m", "engine": "external", "external": {"url": "http://w:8000"}, "cache_isolation": "shared"}
    ]
    result = rendered(render, *CASES["gpu-cluster"][0], values={"models": models})
    env = gateway_env(result)
    assert "SLUICEGATE_CACHE_SALT_SECRET" not in env
    assert "SLUICEGATE_METRICS_TOKEN" not in env
    assert all(
        "authorization" not in e for m in result.of_kind("ServiceMonitor") for e in m["spec"]["endpoints"]
    )
    config = next(c for c in result.of_kind("ConfigMap") if "models.yaml" in c["data"])
    entries = yaml.safe_load(config["data"]["models.yaml"])["models"]
    assert {"name": "m", "cache_isolation": "shared"}.items() <= next(
        e for e in entries if e["name"] == "m"
    ).items()
    assert render(*CASES["gpu-cluster"][0], values={"models": [{**models[0], "cache_isolation": "x"}]}).error
