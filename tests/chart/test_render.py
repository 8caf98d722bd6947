"""Every values set lints, renders and validates against the real Kubernetes schemas, and the
rendered objects hold the properties a reviewer would otherwise check by eye."""

from __future__ import annotations

import base64
import re
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]  # ships no type information
import pytest
import yaml

from gateway.config import Settings
from tests.chart.cases import AUTODISCOVERY, CASES, KEDA, ODD_NAMES
from tests.chart.conftest import (
    CHART,
    NAMESPACE,
    Helm,
    Manifest,
    Render,
    Renderer,
    containers,
    gateway,
    gateway_env,
    pod_owners,
    rendered,
)

# Custom resources: no schema ships with kubernetes-validate; tests/chart/test_monitoring.py and
# test_publishing.py check them.
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule", "ScaledObject", "HTTPRoute"}
KUBE_VERSIONS = ("1.29.0", "1.34.0")


def render_case(render: Renderer, case: str) -> Render:
    files, values = CASES[case]
    return rendered(render, *files, values=values)


@pytest.mark.parametrize("case", sorted(CASES))
def test_lint_strict(helm: Helm, case: str, tmp_path: Any) -> None:
    files, values = CASES[case]
    args = ["lint", "--strict", str(CHART), "--namespace", NAMESPACE]
    for f in files:
        args += ["-f", str(f)]
    if values is not None:
        extra = tmp_path / "values.yaml"
        extra.write_text(yaml.safe_dump(values))
        args += ["-f", str(extra)]
    done = helm.run(*args)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_manifests_validate_against_kubernetes_schemas(render: Renderer, case: str, kube: str) -> None:
    files, values = CASES[case]
    result = render(*files, values=values, kube=kube)
    assert not result.error, result.error
    for obj in result.objects:
        if obj["kind"] in CUSTOM_KINDS:
            continue
        kubernetes_validate.validate(obj, kube, strict=True)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_container_has_probes_resources_and_runs_as_non_root(render: Renderer, case: str) -> None:
    for owner in pod_owners(render_case(render, case)):
        pod = owner["spec"]["template"]["spec"]
        where = f"{owner['kind']}/{owner['metadata']['name']}"
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        for c in containers(owner):
            at = f"{where} container {c['name']}"
            assert "readinessProbe" in c, at
            assert "livenessProbe" in c or "startupProbe" in c, at
            assert c["resources"].get("requests"), at
            assert c["resources"].get("limits"), at
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True, at
            assert sc["allowPrivilegeEscalation"] is False, at
            assert sc["readOnlyRootFilesystem"] is True, at
            assert sc["capabilities"]["drop"] == ["ALL"], at
            assert not sc["capabilities"].get("add"), at


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_image_floats(render: Renderer, case: str) -> None:
    for owner in pod_owners(render_case(render, case)):
        for c in containers(owner):
            name, _, tag = c["image"].rpartition(":")
            assert name, f"{c['image']}: no tag"
            assert "/" not in tag, f"{c['image']}: no tag"
            assert tag != "latest", c["image"]
            assert re.fullmatch(r"v?\d+(\.\d+)*([-.][0-9A-Za-z.]+)?", tag), f"{c['image']}: not a version tag"


@pytest.mark.parametrize("case", sorted(CASES))
def test_rbac_grants_only_reading_endpointslices_and_services(render: Renderer, case: str) -> None:
    result = render_case(render, case)
    assert not result.of_kind("ClusterRole")
    assert not result.of_kind("ClusterRoleBinding")
    for role in result.of_kind("Role"):
        grants = {
            (group, resource, verb)
            for rule in role["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }
        assert not any("resourceNames" in rule or "nonResourceURLs" in rule for rule in role["rules"])
        assert grants == {
            (group, resource, verb)
            for group, resource in (("discovery.k8s.io", "endpointslices"), ("", "services"))
            for verb in ("get", "list", "watch")
        }
    for binding in result.of_kind("RoleBinding"):
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": binding["metadata"]["name"],
        }
        assert binding["subjects"] == [
            {
                "kind": "ServiceAccount",
                "name": gateway(result)["spec"]["template"]["spec"]["serviceAccountName"],
                "namespace": NAMESPACE,
            }
        ]


def test_one_role_per_watched_namespace(render: Renderer) -> None:
    result = rendered(render, values=ODD_NAMES)
    namespaces = {r["metadata"]["namespace"] for r in result.of_kind("Role")}
    assert namespaces == {NAMESPACE, "shared-llm", "canary", "extra-ns"}
    assert {b["metadata"]["namespace"] for b in result.of_kind("RoleBinding")} == namespaces
    env = gateway_env(result)
    assert set(env["SLUICEGATE_KUBERNETES_NAMESPACES"]["value"].split(",")) == namespaces


def test_autodiscovery_allow_list_reaches_the_gateway_and_its_namespaces_are_watched(
    render: Renderer,
) -> None:
    result = rendered(render, values=AUTODISCOVERY)
    env = gateway_env(result)
    settings = Settings.from_env({name: e["value"] for name, e in env.items() if "value" in e})
    assert dict(settings.kubernetes_model_namespaces) == {
        "*": ("team-a",),
        "llama": ("shared-llm", "canary"),
        "team-a/*": ("team-a",),
    }
    assert settings.kubernetes_max_weight == 10.0
    watched = {NAMESPACE, "team-a", "shared-llm", "canary"}
    assert set(settings.kubernetes_namespaces) == watched
    assert {r["metadata"]["namespace"] for r in result.of_kind("Role")} == watched


def test_connection_bounds_reach_the_gateway(render: Renderer) -> None:
    def bounds(result: Render) -> tuple[Any, ...]:
        env = {name: e["value"] for name, e in gateway_env(result).items() if "value" in e}
        s = Settings.from_env(env)
        return (
            s.max_header_bytes,
            s.header_timeout_s,
            s.body_timeout_s,
            s.keep_alive_timeout_s,
            s.max_body_bytes,
            s.max_event_bytes,
            s.admin_max_failures,
            s.trusted_proxies,
        )

    d = Settings()
    assert bounds(rendered(render)) == (
        d.max_header_bytes,
        d.header_timeout_s,
        d.body_timeout_s,
        d.keep_alive_timeout_s,
        d.max_body_bytes,
        d.max_event_bytes,
        d.admin_max_failures,
        d.trusted_proxies,
    ), "the chart's defaults differ from the gateway's own"
    tuned = {
        "maxHeaderBytes": 1048576,
        "headerTimeoutSeconds": 2.5,
        "bodyTimeoutSeconds": 120,
        "keepAliveTimeoutSeconds": 75,
        "maxBodyBytes": 2048,
        "maxEventBytes": 4096,
        "adminMaxFailures": 3,
        "trustedProxies": ["10.0.0.0/8", "fd00::1"],
    }
    result = rendered(render, values={"gateway": {"connections": tuned}})
    assert bounds(result) == (1048576, 2.5, 120.0, 75.0, 2048, 4096, 3, ("10.0.0.0/8", "fd00::1"))


def test_no_discovery_means_no_rbac_and_no_api_token(render: Renderer) -> None:
    result = rendered(
        render, values={"models": [{"name": "m", "engine": "external", "external": {"url": "http://w:8000"}}]}
    )
    assert not result.of_kind("Role")
    pod = gateway(result)["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert "SLUICEGATE_KUBERNETES_NAMESPACES" not in gateway_env(result)


def secret_ref(env: dict[str, Any]) -> tuple[str, str]:
    ref = env["valueFrom"]["secretKeyRef"]
    return ref["name"], ref["key"]


def test_gateway_points_at_the_bundled_redis_and_the_chart_secret(render: Renderer) -> None:
    result = rendered(render)
    env = gateway_env(result)
    names = list(env)
    # $(REDIS_PASSWORD) only expands when the variable is defined before the one using it.
    assert names.index("REDIS_PASSWORD") < names.index("SLUICEGATE_REDIS_URL")
    redis_service = result.one("Service", "sg-sluicegate-redis")
    port = redis_service["spec"]["ports"][0]["port"]
    assert env["SLUICEGATE_REDIS_URL"]["value"] == f"redis://:$(REDIS_PASSWORD)@sg-sluicegate-redis:{port}/0"
    secret = result.one("Secret", "sg-sluicegate")
    assert secret_ref(env["REDIS_PASSWORD"]) == ("sg-sluicegate", "redis-password")
    assert secret_ref(env["SLUICEGATE_ADMIN_TOKEN"]) == ("sg-sluicegate", "admin-token")
    assert set(secret["data"]) == {"admin-token", "redis-password"}
    # Redis requires the same password the gateway sends.
    redis = result.one("StatefulSet", "sg-sluicegate-redis")
    (redis_container,) = redis["spec"]["template"]["spec"]["containers"]
    redis_env = {e["name"]: e for e in redis_container["env"]}
    assert secret_ref(redis_env["REDIS_PASSWORD"]) == ("sg-sluicegate", "redis-password")
    assert redis["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    config = result.one("ConfigMap", "sg-sluicegate-redis")["data"]["redis.conf"]
    assert "appendonly yes" in config.splitlines()
    # The selector of the Service reaches the Redis pod.
    labels = redis["spec"]["template"]["metadata"]["labels"]
    assert redis_service["spec"]["selector"].items() <= labels.items()


def test_gateway_reads_an_external_redis_url_from_a_secret(render: Renderer) -> None:
    result = render_case(render, "external-redis-url")
    env = gateway_env(result)
    assert secret_ref(env["SLUICEGATE_REDIS_URL"]) == ("sg-sluicegate", "redis-url")
    assert "REDIS_PASSWORD" not in env
    assert not result.of_kind("StatefulSet")
    assert set(result.one("Secret")["data"]) == {"admin-token", "redis-url"}

    result = render_case(render, "external-redis-secret")
    assert secret_ref(gateway_env(result)["SLUICEGATE_REDIS_URL"]) == ("managed-redis", "redis-url")


def test_gateway_reads_a_redis_cluster_url_from_a_secret(render: Renderer) -> None:
    result = render_case(render, "external-redis-cluster")
    assert secret_ref(gateway_env(result)["SLUICEGATE_REDIS_URL"]) == ("sg-sluicegate", "redis-url")
    assert not result.of_kind("StatefulSet")
    url = base64.b64decode(result.one("Secret")["data"]["redis-url"]).decode()
    assert url.startswith("rediss+cluster://")


def test_existing_secrets_replace_the_generated_ones(render: Renderer) -> None:
    result = render_case(render, "existing-secrets")
    env = gateway_env(result)
    assert secret_ref(env["SLUICEGATE_ADMIN_TOKEN"]) == ("my-admin", "admin-token")
    assert secret_ref(env["REDIS_PASSWORD"]) == ("my-redis", "pw")
    assert not result.of_kind("Secret")


def test_gateway_deployment_shape(render: Renderer) -> None:
    deployment = gateway(rendered(render))
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["ports"] == [
        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
        {"name": "admin", "containerPort": 8081, "protocol": "TCP"},
    ]
    env = gateway_env(rendered(render))
    assert env["SLUICEGATE_PORT"]["value"] == "8080"
    assert env["SLUICEGATE_ADMIN_PORT"]["value"] == "8081"
    # The spool is on a writable volume: the root filesystem is read-only.
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert env["SLUICEGATE_SPOOL_PATH"]["value"].startswith("/var/lib/sluicegate/")
    assert mounts["/var/lib/sluicegate"] == "spool"
    assert env["SLUICEGATE_CONFIG"]["value"] == "/etc/sluicegate/models.yaml"
    assert mounts["/etc/sluicegate"] == "config"
    assert deployment["kind"] == "Deployment"
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pdb = rendered(render).one("PodDisruptionBudget")
    assert (
        pdb["spec"]["selector"]["matchLabels"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )


def test_the_admin_plane_has_an_internal_service_and_the_monitor_follows_it(render: Renderer) -> None:
    result = rendered(render, values={"monitoring": {"serviceMonitor": {"enabled": True}}})
    services = {s["metadata"]["name"]: s for s in result.of_kind("Service")}
    admin = services["sg-sluicegate-admin"]
    assert admin["spec"]["type"] == "ClusterIP"
    assert admin["spec"]["ports"] == [
        {"name": "admin", "port": 8081, "targetPort": "admin", "protocol": "TCP"}
    ]
    assert [p["targetPort"] for p in services["sg-sluicegate"]["spec"]["ports"]] == ["http"]
    monitor = next(m for m in result.of_kind("ServiceMonitor") if m["metadata"]["name"] == "sg-sluicegate")
    assert monitor["spec"]["endpoints"][0]["port"] == "admin"
    assert monitor["spec"]["selector"]["matchLabels"]["sluicegate.io/plane"] == "admin"


def test_admin_port_zero_serves_everything_on_the_client_port(render: Renderer) -> None:
    values = {"gateway": {"adminPort": 0}, "monitoring": {"serviceMonitor": {"enabled": True}}}
    result = rendered(render, values=values)
    assert "sg-sluicegate-admin" not in {s["metadata"]["name"] for s in result.of_kind("Service")}
    assert "SLUICEGATE_ADMIN_PORT" not in gateway_env(result)
    monitor = next(m for m in result.of_kind("ServiceMonitor") if m["metadata"]["name"] == "sg-sluicegate")
    assert monitor["spec"]["endpoints"][0]["port"] == "http"


def test_autoscaling_leaves_replicas_to_the_hpa(render: Renderer) -> None:
    result = render_case(render, "autoscaling")
    assert "replicas" not in gateway(result)["spec"]
    hpa = result.one("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "sg-sluicegate",
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)
    assert not rendered(render).of_kind("HorizontalPodAutoscaler")


def workers(result: Render) -> list[Manifest]:
    return [
        d
        for d in result.of_kind("Deployment")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"
    ]


def service_for(result: Render, deployment: Manifest) -> Manifest:
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    found = [
        s
        for s in result.of_kind("Service")
        if s["metadata"]["labels"].get("app.kubernetes.io/component") == "worker"
        and s["spec"]["selector"].items() <= labels.items()
    ]
    assert len(found) == 1, deployment["metadata"]["name"]
    return found[0]


@pytest.mark.parametrize("case", ["default", "gpu-cluster", "cpu-dev", "keda", "odd-names"])
def test_each_worker_service_is_discoverable_on_the_port_its_container_listens_on(
    render: Renderer, case: str
) -> None:
    result = render_case(render, case)
    assert workers(result)
    for deployment in workers(result):
        service = service_for(result, deployment)
        real_name = service["metadata"]["annotations"]["sluicegate.io/model"]
        label = service["metadata"]["labels"]["sluicegate.io/model"]
        assert re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]", label)
        assert label == real_name or not re.fullmatch(r"[A-Za-z0-9][-A-Za-z0-9_.]*[A-Za-z0-9]", real_name)
        (port,) = service["spec"]["ports"]
        assert port["name"] == "http"
        assert port["targetPort"] == "http"
        (c,) = deployment["spec"]["template"]["spec"]["containers"]
        (container_port,) = c["ports"]
        assert container_port["name"] == "http"
        listens = next(a for a in c["args"] if a.startswith("--port="))
        assert listens == f"--port={container_port['containerPort']}"
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}


def test_odd_model_names_get_valid_object_names_and_keep_the_real_name(render: Renderer) -> None:
    result = rendered(render, values=ODD_NAMES)
    (deployment,) = workers(result)
    service = service_for(result, deployment)
    assert service["metadata"]["annotations"]["sluicegate.io/model"] == "meta-llama/Llama-3.1-8B-Instruct:fp8"
    assert re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", service["metadata"]["name"])
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--served-model-name=meta-llama/Llama-3.1-8B-Instruct:fp8" in c["args"]


@pytest.mark.parametrize("case", ["default", "gpu-cluster", "keda", "odd-names"])
def test_vllm_workers_request_gpus_and_shared_memory(render: Renderer, case: str) -> None:
    result = render_case(render, case)
    vllm = [
        d
        for d in workers(result)
        if d["spec"]["template"]["metadata"]["labels"]["sluicegate.io/engine"] == "vllm"
    ]
    assert vllm
    for deployment in vllm:
        pod = deployment["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        assert int(c["resources"]["limits"]["nvidia.com/gpu"]) >= 1
        assert c["resources"]["requests"]["nvidia.com/gpu"] == c["resources"]["limits"]["nvidia.com/gpu"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["shm"]["emptyDir"]["medium"] == "Memory"
        assert {m["name"]: m["mountPath"] for m in c["volumeMounts"]}["shm"] == "/dev/shm"
        assert c["args"][0]
        assert not c["args"][0].startswith("--")
        assert any(a.startswith("--served-model-name=") for a in c["args"])
        # A weight load may take many minutes before the pod is restarted.
        startup = c["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 600


def test_gpu_example_wires_the_hf_token_cache_and_tool_parser(render: Renderer) -> None:
    result = render_case(render, "gpu-cluster")
    by_model = {d["metadata"]["annotations"]["sluicegate.io/model"]: d for d in workers(result)}
    assert set(by_model) == {"llama-3.1-8b", "qwen2.5-32b", "reframr"}
    (c,) = by_model["llama-3.1-8b"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert secret_ref(env["HF_TOKEN"]) == ("hf-token", "token")
    assert {"--enable-auto-tool-choice", "--tool-call-parser=llama3_json"} <= set(c["args"])
    (c,) = by_model["qwen2.5-32b"]["spec"]["template"]["spec"]["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert "--tensor-parallel-size=2" in c["args"]
    claims = {p["metadata"]["name"]: p for p in result.of_kind("PersistentVolumeClaim")}
    for model in ("llama-3.1-8b", "qwen2.5-32b"):
        pod = by_model[model]["spec"]["template"]["spec"]
        cache = next(v for v in pod["volumes"] if v["name"] == "cache")
        assert claims[cache["persistentVolumeClaim"]["claimName"]]["spec"]["accessModes"] == ["ReadWriteMany"]
    reframr = by_model["reframr"]["spec"]["template"]["spec"]
    (c,) = reframr["containers"]
    assert "--model-dir=/models/reframr" in c["args"]
    model = next(v for v in reframr["volumes"] if v["name"] == "model")
    assert model["persistentVolumeClaim"] == {"claimName": "reframr-model", "readOnly": True}
    assert "nvidia.com/gpu" not in c["resources"].get("limits", {})


def model_table(result: Render) -> Any:
    return yaml.safe_load(result.one("ConfigMap", "sg-sluicegate-models")["data"]["models.yaml"])


def config_checksum(result: Render) -> str:
    value: str = gateway(result)["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    return value


def test_config_checksum_changes_with_the_model_table(render: Renderer) -> None:
    before = rendered(render)
    changed = rendered(render, values={"models": [{**CASES_DEFAULT_MODEL, "aliases": ["default", "qwen"]}]})
    assert model_table(before) != model_table(changed)
    assert config_checksum(before) != config_checksum(changed)
    # ... and only then: an unrelated change does not restart the gateway.
    unrelated = rendered(render, values={"gateway": {"logLevel": "debug"}})
    assert config_checksum(unrelated) == config_checksum(before)


CASES_DEFAULT_MODEL: dict[str, Any] = {
    "name": "qwen2.5-7b",
    "engine": "vllm",
    "aliases": ["default"],
    "vllm": {"model": "Qwen/Qwen2.5-7B-Instruct", "toolCallParser": "hermes", "maxModelLen": 8192},
}


def test_model_table_points_each_model_at_its_worker_service(render: Renderer) -> None:
    result = rendered(render, values=ODD_NAMES)
    table = {m["name"]: m for m in model_table(result)["models"]}
    (deployment,) = workers(result)
    service = service_for(result, deployment)
    assert table["meta-llama/Llama-3.1-8B-Instruct:fp8"] == {
        "name": "meta-llama/Llama-3.1-8B-Instruct:fp8",
        "aliases": ["llama"],
        "fallbacks": ["remote-model"],
        "discovery": {
            "kubernetes": {"namespace": NAMESPACE, "service": service["metadata"]["name"], "port": "http"}
        },
    }
    assert table["remote-model"]["endpoints"] == [{"url": "http://10.0.0.5:8000"}]
    assert table["shared-model"]["discovery"] == {
        "kubernetes": {"namespace": "shared-llm", "service": "shared-llm", "port": "http"}
    }
    assert table["canary-model"] == ODD_NAMES["extraModels"][0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_gateway_accepts_the_rendered_model_table(render: Renderer, case: str) -> None:
    from gateway.model_file import parse_model_table

    table = parse_model_table(model_table(render_case(render, case)))
    files, values = CASES[case]
    expected = yaml.safe_load(files[0].read_text()) if files else (values or {})
    names = [m["name"] for m in expected.get("models", [CASES_DEFAULT_MODEL])]
    names += [m["name"] for m in expected.get("extraModels", [])]
    assert [m.name for m in table.models] == names


def test_keda_scales_each_worker_on_its_queue(render: Renderer) -> None:
    result = rendered(render, values=KEDA)
    objects = {o["metadata"]["annotations"]["sluicegate.io/model"]: o for o in result.of_kind("ScaledObject")}
    assert set(objects) == {"qwen", "reframr"}
    for deployment in workers(result):
        # KEDA owns the replica count; a rendered one would fight it on every upgrade.
        assert "replicas" not in deployment["spec"]
        model = deployment["metadata"]["annotations"]["sluicegate.io/model"]
        assert objects[model]["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    (trigger,) = objects["qwen"]["spec"]["triggers"]
    assert (
        trigger["metadata"]["query"]
        == f'sum(vllm:num_requests_waiting{{namespace="{NAMESPACE}", model_name="qwen"}})'
    )
    assert trigger["metadata"]["threshold"] == "5"
    (trigger,) = objects["reframr"]["spec"]["triggers"]
    assert (
        trigger["metadata"]["query"]
        == f'sum(sluicegate_pool_queue_depth{{namespace="{NAMESPACE}", pool="reframr"}})'
    )
