"""The pure parts of discovery, without any server: slices → URLs, Services → models, the own
namespace, backoff, configuration loading, and that nothing loads the client library unasked."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gateway.config import Settings
from gateway.discovery.autodiscovery import DiscoveredService, build_models, service_pool
from gateway.discovery.endpoints import endpoint_urls
from gateway.discovery.trust import ServiceTrust
from gateway.discovery.watch import Backoff
from gateway.errors import ConfigError
from gateway.model_table import KubernetesTarget, PoolConfig
from tests.discovery.label_selectors import matches, parse_selector
from tests.discovery.objects import endpoint, endpoint_slice, service


def test_ready_unset_counts_and_not_ready_or_terminating_do_not() -> None:
    slice_ = endpoint_slice(
        "ns",
        "s",
        "svc",
        [
            endpoint("10.0.0.1"),
            endpoint("10.0.0.2", ready=None),
            endpoint("10.0.0.3", ready=False),
            endpoint("10.0.0.4", terminating=True),
            endpoint("10.0.0.5", ready=None, terminating=False),
            {"addresses": ["10.0.0.6", "10.0.0.7"]},  # no conditions at all
        ],
    )
    assert endpoint_urls([slice_], "http") == {f"http://10.0.0.{i}:8000" for i in (1, 2, 5, 6, 7)}


def test_ports_match_by_name_or_number_and_only_tcp() -> None:
    slice_ = endpoint_slice("ns", "s", "svc", [endpoint("fd00::5")])
    slice_["ports"] = [
        {"name": "http", "port": 8000},  # protocol unset means TCP
        {"name": "dns", "port": 53, "protocol": "UDP"},
        {"name": "all", "port": None},
        {"name": "", "port": 9000, "protocol": "TCP"},
    ]
    assert endpoint_urls([slice_], "http") == {"http://[fd00::5]:8000"}
    assert endpoint_urls([slice_], 9000) == {"http://[fd00::5]:9000"}
    assert endpoint_urls([slice_], "dns") == frozenset()
    assert endpoint_urls([slice_], "metrics") == frozenset()


def test_slices_without_endpoints_or_ports_are_empty_not_errors() -> None:
    empty: dict[str, Any] = {
        "metadata": {"name": "x"},
        "addressType": "IPv4",
        "endpoints": None,
        "ports": None,
    }
    assert endpoint_urls([empty], "http") == frozenset()
    both = [endpoint_slice("ns", "a", "svc", [endpoint("10.0.0.1")]), empty]
    assert endpoint_urls(both, "http") == {"http://10.0.0.1:8000"}


def _svc(**kwargs: Any) -> dict[str, Any]:
    return service("llm", "svc", **kwargs)


def test_a_service_becomes_one_pool() -> None:
    found = service_pool(_svc(model_label="llama", annotations={"sluicegate.io/aliases": " a, ,b "}))
    assert found == DiscoveredService(
        namespace="llm",
        service="svc",
        model="llama",
        aliases=("a", "b"),
        pool=PoolConfig(
            name="llama/llm/svc", kubernetes=KubernetesTarget(service="svc", namespace="llm", port="http")
        ),
    )


@pytest.mark.parametrize(
    ("annotations", "ports", "port"),
    [
        ({"sluicegate.io/port": "8001"}, None, 8001),
        ({"sluicegate.io/port": "grpc"}, None, "grpc"),
        ({}, [{"name": "metrics", "port": 9090}, {"name": "http", "port": 80}], "http"),
        ({}, [{"name": "api", "port": 80, "targetPort": 8000}], "api"),
        ({}, [{"port": 80, "targetPort": 8000}], 8000),
        ({}, [{"port": 8080}], 8080),
    ],
)
def test_the_port_of_a_service(
    annotations: dict[str, str], ports: list[dict[str, Any]] | None, port: str | int
) -> None:
    found = service_pool(_svc(model_label="m", annotations=annotations, ports=ports))
    assert found.pool.kubernetes is not None
    assert found.pool.kubernetes.port == port


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model_label": ""}, "sluicegate.io/model"),
        ({"model_label": "m", "annotations": {"sluicegate.io/weight": "heavy"}}, "sluicegate.io/weight"),
        ({"model_label": "m", "annotations": {"sluicegate.io/weight": "0"}}, "sluicegate.io/weight"),
        ({"model_label": "m", "ports": []}, "sluicegate.io/port"),
        ({"model_label": "m", "ports": [{"port": 80, "targetPort": "web"}]}, "sluicegate.io/port"),
        ({"model_label": "m", "annotations": {"sluicegate.io/port": "Not_A_Port"}}, "port"),
        ({"model_label": "m", "annotations": {"sluicegate.io/aliases": "ok,bad alias"}}, "aliases"),
        ({"model_label": "m", "annotations": {"sluicegate.io/upstream-model": " "}}, "upstream_model"),
        ({"model_label": "m", "annotations": {"sluicegate.io/model": "-bad"}}, "name"),
    ],
)
def test_invalid_services_are_config_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        service_pool(_svc(**kwargs))


def test_the_model_namespaces_and_weight_cap_settings() -> None:
    settings = Settings.from_env(
        {
            "SLUICEGATE_KUBERNETES_MODEL_NAMESPACES": " llama=team-a, team-b ; team-b/*=team-b;*=shared;",
            "SLUICEGATE_KUBERNETES_MAX_WEIGHT": "250",
        }
    )
    assert settings.kubernetes_max_weight == 250.0
    trust = ServiceTrust("gw", settings.kubernetes_model_namespaces, settings.kubernetes_max_weight)
    assert trust.allowed_namespaces("llama") == ("team-a", "team-b")
    assert trust.allowed_namespaces("team-b/x") == ("team-b",)  # the longer pattern wins
    assert trust.allowed_namespaces("other") == ("shared",)
    assert trust.refusal("team-b", ["llama", "team-b/alias"], 250) is None
    assert trust.refusal("team-b", ["llama", "team-b/alias"], 251) is not None
    defaults = Settings.from_env({})
    assert defaults.kubernetes_max_weight == 100.0
    unlisted = ServiceTrust("gw", defaults.kubernetes_model_namespaces, defaults.kubernetes_max_weight)
    assert unlisted.refusal("gw", ["any"], 100) is None
    assert unlisted.refusal("team-a", ["any"], 1) is not None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SLUICEGATE_KUBERNETES_MODEL_NAMESPACES", "llama"),
        ("SLUICEGATE_KUBERNETES_MODEL_NAMESPACES", "llama="),
        ("SLUICEGATE_KUBERNETES_MODEL_NAMESPACES", "=team-a"),
        ("SLUICEGATE_KUBERNETES_MODEL_NAMESPACES", "llama=Team_A"),
        ("SLUICEGATE_KUBERNETES_MODEL_NAMESPACES", "bad model=team-a"),
        ("SLUICEGATE_KUBERNETES_MODEL_NAMESPACES", "a*b=team-a"),
        ("SLUICEGATE_KUBERNETES_MODEL_NAMESPACES", "llama=a;llama=b"),
        ("SLUICEGATE_KUBERNETES_MAX_WEIGHT", "heavy"),
        ("SLUICEGATE_KUBERNETES_MAX_WEIGHT", "0"),
        ("SLUICEGATE_KUBERNETES_MAX_WEIGHT", "inf"),
    ],
)
def test_a_bad_allow_list_or_weight_cap_stops_the_start(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"^{name}: "):
        Settings.from_env({name: value})


def _found(model: str, name: str, aliases: tuple[str, ...] = (), namespace: str = "llm") -> DiscoveredService:
    target = KubernetesTarget(service=name, namespace=namespace)
    return DiscoveredService(
        namespace, name, model, aliases, PoolConfig(f"{model}/{namespace}/{name}", kubernetes=target)
    )


def test_models_from_services_and_who_wins_a_name() -> None:
    models, warnings = build_models(
        [
            _found("a", "a2", aliases=("x",)),
            _found("a", "a1", aliases=("y", "b")),  # "b" is another model's name
            _found("b", "b1", aliases=("x",)),  # "x" is a's already
            _found("static", "s1"),
            _found("c", "c1", aliases=("static-alias",)),
        ],
        reserved={"static", "static-alias"},
    )
    assert sorted(models) == ["a", "b"]
    assert models["a"].aliases == ("x", "y")
    assert [p.name for p in models["a"].pools] == ["a/llm/a1", "a/llm/a2"]
    assert models["b"].aliases == ()
    assert len(warnings) == 4
    assert any("llm/s1" in w for w in warnings)
    assert any("llm/c1" in w for w in warnings)


def test_backoff_doubles_to_its_cap_with_jitter() -> None:
    backoff = Backoff(0.5, 30.0, rng=lambda: 1.0)
    assert [backoff.next_delay() for _ in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    low = Backoff(0.5, 30.0, rng=lambda: 0.0)
    assert low.next_delay() == 0.25
    backoff.reset()
    assert backoff.next_delay() == 0.5
    for _ in range(1000):  # no overflow however long the outage
        assert backoff.next_delay() <= 30.0


def test_own_namespace_order(tmp_path: Path) -> None:
    from gateway.discovery.client import own_namespace

    sa = tmp_path / "sa"
    assert own_namespace(str(sa), {}, None) == "default"
    assert own_namespace(str(sa), {}, "ctx") == "ctx"
    assert own_namespace(str(sa), {"POD_NAMESPACE": "pod"}, "ctx") == "pod"
    sa.mkdir()
    (sa / "namespace").write_text("mounted\n")
    assert own_namespace(str(sa), {"POD_NAMESPACE": "pod"}, "ctx") == "mounted"


def test_in_a_pod_the_service_account_is_used(tmp_path: Path) -> None:
    from gateway.discovery.client import load_access

    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("sa-token-value")
    (sa / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    (sa / "namespace").write_text("gateway-ns")
    environ = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    # A kubeconfig given too is ignored in a pod.
    access = asyncio.run(load_access(str(tmp_path / "kubeconfig"), environ, str(sa)))
    assert access.configuration.host == "https://[fd00::1]:443"
    assert access.configuration.ssl_ca_cert == str(sa / "ca.crt")
    assert access.configuration.api_key["BearerToken"] == "Bearer sa-token-value"
    assert access.namespace == "gateway-ns"
    assert access.source == "in-cluster service account"


def test_without_kubernetes_targets_nothing_starts_or_loads() -> None:
    # A fresh interpreter: the test session itself has long imported the client library.
    code = textwrap.dedent(
        """
        import asyncio, sys
        from gateway.config import Settings
        from gateway.discovery.kubernetes import start_discovery
        from gateway.model_table import ModelConfig, ModelTable

        table = ModelTable((ModelConfig(name="m", endpoints=("http://127.0.0.1:9",)),))
        result = asyncio.run(start_discovery(Settings(), table, sink=None))
        assert result is None, result
        assert not [m for m in sys.modules if m.startswith("kubernetes_asyncio")], "client library loaded"
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_fake_servers_label_selectors() -> None:
    labels = {"app": "x", "tier": "gpu"}
    assert matches(parse_selector("app=x"), labels)
    assert matches(parse_selector("app==x,tier"), labels)
    assert matches(parse_selector("app in (y, x),tier notin (cpu)"), labels)
    assert not matches(parse_selector("app!=x"), labels)
    assert not matches(parse_selector("!tier"), labels)
    assert not matches(parse_selector("missing"), labels)
    with pytest.raises(ValueError, match="unable to parse"):
        parse_selector("app in x")
