"""Where a model's workers are, in the model file: its endpoints, its Kubernetes discovery, or
its pools of either (gateway/model_file.py parses the rest of a model).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from gateway.errors import ConfigError
from gateway.model_fields import number, require_mapping, upstream_model
from gateway.model_table import KubernetesTarget, PoolConfig

# RFC 1123 label (namespaces) and DNS-1035 label (Services, port names): what the API server accepts.
_K8S_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_PORT_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,13}[a-z0-9])?$")
TARGET_FIELDS = {"endpoints", "discovery"}


def parse_target(raw: dict[str, Any], where: str) -> tuple[tuple[str, ...], KubernetesTarget | None]:
    if "discovery" in raw:
        return (), _parse_discovery(raw["discovery"], f"{where}.discovery")
    endpoints_raw = raw.get("endpoints")
    if not isinstance(endpoints_raw, list) or not endpoints_raw:
        raise ConfigError(f"{where}.endpoints: expected a non-empty list of {{url: ...}}")
    endpoints = tuple(_parse_endpoint(e, f"{where}.endpoints[{i}]") for i, e in enumerate(endpoints_raw))
    if len(set(endpoints)) != len(endpoints):
        raise ConfigError(f"{where}.endpoints: the same url is listed twice")
    return endpoints, None


def parse_pools(raw: Any, where: str, model_name: str) -> tuple[PoolConfig, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: expected a non-empty list of pools")
    pools: list[PoolConfig] = []
    for i, entry in enumerate(raw):
        at = f"{where}[{i}]"
        require_mapping(entry, at, allowed={"name", "weight", "upstream_model"} | TARGET_FIELDS)
        pool_name = entry.get("name")
        if not isinstance(pool_name, str) or not _K8S_NAME_RE.fullmatch(pool_name):
            raise ConfigError(f"{at}.name: required, lower-case letters, digits and '-'")
        weight = number(entry.get("weight", 1), f"{at}.weight")
        given = [k for k in TARGET_FIELDS if k in entry]
        if len(given) != 1:
            raise ConfigError(f"{at}.endpoints: give exactly one of endpoints or discovery")
        endpoints, kubernetes = parse_target(entry, at)
        pools.append(
            PoolConfig(
                name=f"{model_name}/{pool_name}",
                weight=weight,
                endpoints=endpoints,
                kubernetes=kubernetes,
                upstream_model=upstream_model(entry.get("upstream_model"), f"{at}.upstream_model"),
            )
        )
    if len({p.name for p in pools}) != len(pools):
        raise ConfigError(f"{where}: two pools have the same name")
    return tuple(pools)


def _parse_discovery(raw: Any, where: str) -> KubernetesTarget:
    require_mapping(raw, where, allowed={"kubernetes"})
    k8s = raw.get("kubernetes")
    at = f"{where}.kubernetes"
    require_mapping(k8s, at, allowed={"namespace", "service", "port"})
    service = k8s.get("service")
    if not isinstance(service, str) or not _K8S_NAME_RE.fullmatch(service):
        raise ConfigError(f"{at}.service: required, a Service name")
    namespace = k8s.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not _K8S_NAME_RE.fullmatch(namespace)):
        raise ConfigError(f"{at}.namespace: expected a namespace name")
    port = k8s.get("port", "http")
    if isinstance(port, bool) or not (
        (isinstance(port, int) and 0 < port < 65536)
        or (isinstance(port, str) and _PORT_NAME_RE.fullmatch(port))
    ):
        raise ConfigError(f"{at}.port: expected a port name or number")
    return KubernetesTarget(service=service, namespace=namespace, port=port)


def _parse_endpoint(raw: Any, where: str) -> str:
    require_mapping(raw, where, allowed={"url"})
    url = raw.get("url")
    if not isinstance(url, str):
        raise ConfigError(f"{where}.url: required, an http:// or https:// URL")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}.url: expected an http:// or https:// URL, got {url!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(f"{where}.url: give the worker's base URL only (no path), got {url!r}")
    try:
        parts.port  # noqa: B018 -- urlsplit validates the port lazily
    except ValueError:
        raise ConfigError(f"{where}.url: bad port in {url!r}") from None
    return url.rstrip("/")
