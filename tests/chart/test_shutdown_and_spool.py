"""The gateway's graceful shutdown settings and its usage spool, as the cluster would get them: the
drain settings reach the gateway as the environment it parses, the grace period covers the whole
shutdown, and with gateway.spool.persistence the gateway becomes a StatefulSet with a claim per
replica that every object pointing at the gateway still reaches."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from gateway.config import Settings
from tests.chart.cases import SPOOL_CLAIMS, SPOOL_CLAIMS_AUTOSCALED, SPOOL_EXISTING_CLAIM
from tests.chart.conftest import (
    GATEWAY,
    NAMESPACE,
    Manifest,
    Render,
    Renderer,
    gateway,
    gateway_env,
    rendered,
)

SPOOL_DIR = "/var/lib/sluicegate"


def shutdown_settings(result: Render) -> tuple[float, float]:
    env = {name: e["value"] for name, e in gateway_env(result).items() if "value" in e}
    settings = Settings.from_env(env)
    return settings.shutdown_delay_s, settings.drain_timeout_s


def grace_period(result: Render) -> int:
    value: int = gateway(result)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    return value


def gateway_container(result: Render) -> Manifest:
    (container,) = gateway(result)["spec"]["template"]["spec"]["containers"]
    found: Manifest = container
    return found


def external(name: str, **timeouts: float) -> dict[str, Any]:
    model: dict[str, Any] = {"name": name, "engine": "external", "external": {"url": f"http://{name}:8000"}}
    if timeouts:
        model["timeouts"] = timeouts
    return model


def test_default_drain_is_the_longest_answer_and_the_grace_period_covers_it(render: Renderer) -> None:
    result = rendered(render)
    # The default model table leaves timeouts.total at the gateway's 600 s: the drain waits for it,
    # so a rollout cuts no answer (a pod with nothing in flight still stops at once).
    assert shutdown_settings(result) == (Settings().shutdown_delay_s, 600.0) == (5.0, 600.0)
    assert gateway_env(result)["SLUICEGATE_SHUTDOWN_DELAY"]["value"] == "5"
    assert gateway_env(result)["SLUICEGATE_DRAIN_TIMEOUT"]["value"] == "600"
    # delay + drain + 10 s to flush metering
    assert grace_period(result) == 5 + 600 + 10
    # The gateway delays itself after SIGTERM: a preStop sleep would only add to it.
    assert "lifecycle" not in gateway_container(result)


@pytest.mark.parametrize(
    ("values", "drain"),
    [
        ({"models": [external("a", total=900), external("b", total=60)]}, 900),
        # A model that leaves timeouts.total out counts as the gateway's 600 s.
        ({"models": [external("a", total=60), external("b", connect=1)]}, 600),
        ({"models": [external("a", total=60)]}, 60),
        # extraModels count too; a fraction is rounded up to whole seconds.
        ({"models": [external("a", total=60)], "extraModels": [external("x", total=899.5)]}, 900),
        # No model at all: the gateway's own default answer time.
        ({"models": []}, 600),
    ],
)
def test_empty_drain_is_derived_from_the_longest_timeouts_total(
    render: Renderer, values: dict[str, Any], drain: int
) -> None:
    result = rendered(render, values=values)
    assert gateway_env(result)["SLUICEGATE_DRAIN_TIMEOUT"]["value"] == str(drain)
    assert shutdown_settings(result) == (5.0, float(drain))
    assert grace_period(result) == 5 + drain + 10


@pytest.mark.parametrize(
    ("delay", "drain"),
    [(0, 0), (2.5, 120), (10, 3600)],
)
def test_shutdown_overrides_reach_the_gateway_and_the_grace_period(
    render: Renderer, delay: float, drain: float
) -> None:
    shutdown = {"delaySeconds": delay, "drainTimeoutSeconds": drain}
    # An explicit drain wins over the one derived from the models (here 900 s).
    values = {"gateway": {"shutdown": shutdown}, "models": [external("a", total=900)]}
    result = rendered(render, values=values)
    assert shutdown_settings(result) == (delay, drain)
    assert grace_period(result) == math.ceil(delay + drain) + 10


def test_grace_period_may_be_raised_but_not_lowered(render: Renderer) -> None:
    assert grace_period(rendered(render, values={"gateway": {"terminationGracePeriodSeconds": 900}})) == 900
    # Exactly what the shutdown needs is enough; one second less fails (tests/chart/test_validations.py).
    assert grace_period(rendered(render, values={"gateway": {"terminationGracePeriodSeconds": 615}})) == 615
    short = render(values={"gateway": {"terminationGracePeriodSeconds": 614}})
    assert not short.objects
    assert "would cut the shutdown short" in short.error
    # The derived drain follows the models, and so does the least grace period.
    longer = {"models": [external("a", total=900)], "gateway": {"terminationGracePeriodSeconds": 914}}
    assert "= 915" in render(values=longer).error
    shorter = {"shutdown": {"drainTimeoutSeconds": 30}, "terminationGracePeriodSeconds": 45}
    assert grace_period(rendered(render, values={"gateway": shorter})) == 45


def test_deployment_by_default_with_the_spool_on_an_empty_dir(render: Renderer) -> None:
    result = rendered(render)
    deployment = gateway(result)
    assert deployment["kind"] == "Deployment"
    assert not [s for s in result.of_kind("StatefulSet") if s["metadata"]["name"] == GATEWAY]
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["spool"] == {"name": "spool", "emptyDir": {"sizeLimit": "64Mi"}}
    assert "volumeClaimTemplates" not in deployment["spec"]


def spool_mount(result: Render) -> Manifest:
    container = gateway_container(result)
    mounts: list[Manifest] = [m for m in container["volumeMounts"] if m["name"] == "spool"]
    (mount,) = mounts
    spool_path = gateway_env(result)["SLUICEGATE_SPOOL_PATH"]["value"]
    assert spool_path.startswith(mount["mountPath"] + "/"), "the spool file is not on the spool volume"
    return mount


def test_persistent_spool_runs_a_statefulset_with_a_claim_per_replica(render: Renderer) -> None:
    result = rendered(render, values=SPOOL_CLAIMS)
    statefulset = gateway(result)
    assert statefulset["kind"] == "StatefulSet"
    assert not [d for d in result.of_kind("Deployment") if d["metadata"]["name"] == GATEWAY]
    spec = statefulset["spec"]
    assert spec["replicas"] == 2
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "spool"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    # The claim template provides the volume: the pod must not declare one of the same name.
    assert "spool" not in {v["name"] for v in spec["template"]["spec"]["volumes"]}
    assert spool_mount(result)["mountPath"] == SPOOL_DIR
    # Claims outlive their pods, so the next pod of an ordinal finds what the last one spooled.
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    # The governing Service exists.
    assert result.one("Service", spec["serviceName"])
    # No storageClassName means the cluster's default.
    plain = rendered(render, values={"gateway": {"spool": {"persistence": {"enabled": True}}}})
    (claim,) = gateway(plain)["spec"]["volumeClaimTemplates"]
    assert "storageClassName" not in claim["spec"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"


def test_existing_spool_claim_mounts_it_on_the_single_replica(render: Renderer) -> None:
    result = rendered(render, values=SPOOL_EXISTING_CLAIM)
    statefulset = gateway(result)
    assert statefulset["kind"] == "StatefulSet"
    assert statefulset["spec"]["replicas"] == 1
    assert "volumeClaimTemplates" not in statefulset["spec"]
    volumes = {v["name"]: v for v in statefulset["spec"]["template"]["spec"]["volumes"]}
    assert volumes["spool"]["persistentVolumeClaim"] == {"claimName": "gateway-spool"}
    assert spool_mount(result)["mountPath"] == SPOOL_DIR


def without_spool_volume(owner: Manifest) -> dict[str, Any]:
    template: dict[str, Any] = copy.deepcopy(owner["spec"]["template"])
    template["spec"]["volumes"] = [v for v in template["spec"]["volumes"] if v["name"] != "spool"]
    return template


@pytest.mark.parametrize("persistence", [SPOOL_CLAIMS, SPOOL_EXISTING_CLAIM])
def test_pod_template_is_the_same_for_both_kinds_but_for_the_spool_volume(
    render: Renderer, persistence: dict[str, Any]
) -> None:
    gateway_values = {k: v for k, v in persistence["gateway"].items() if k != "spool"}
    deployment = gateway(rendered(render, values={"gateway": gateway_values}))
    statefulset = gateway(rendered(render, values=persistence))
    assert (deployment["kind"], statefulset["kind"]) == ("Deployment", "StatefulSet")
    assert without_spool_volume(statefulset) == without_spool_volume(deployment)
    assert statefulset["spec"]["selector"] == deployment["spec"]["selector"]
    assert statefulset["metadata"]["labels"] == deployment["metadata"]["labels"]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def test_service_hpa_pdb_and_service_monitor_reach_the_statefulset(render: Renderer) -> None:
    result = rendered(render, values=SPOOL_CLAIMS_AUTOSCALED)
    statefulset = gateway(result)
    assert statefulset["kind"] == "StatefulSet"
    assert "replicas" not in statefulset["spec"], "the HPA owns the replica count"
    pod_labels = statefulset["spec"]["template"]["metadata"]["labels"]
    hpa = result.one("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": GATEWAY}
    pdb = result.one("PodDisruptionBudget")
    assert selects(pdb["spec"]["selector"]["matchLabels"], pod_labels)
    service = result.one("Service", GATEWAY)
    assert selects(service["spec"]["selector"], pod_labels)
    ports = {p["name"] for p in statefulset["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert service["spec"]["ports"][0]["targetPort"] in ports
    # /metrics is on the admin port (gateway.adminPort): the monitor scrapes the admin Service.
    admin = result.one("Service", f"{GATEWAY}-admin")
    assert selects(admin["spec"]["selector"], pod_labels)
    assert admin["spec"]["ports"][0]["targetPort"] in ports
    monitor = result.one("ServiceMonitor", GATEWAY)
    assert selects(monitor["spec"]["selector"]["matchLabels"], admin["metadata"]["labels"])
    assert not selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in admin["spec"]["ports"]}
