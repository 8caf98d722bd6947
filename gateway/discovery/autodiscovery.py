"""Services labelled `sluicegate.io/model` → models, each such Service one pool of its model.

The model name is the `sluicegate.io/model` annotation when present (model names may hold `/`,
which label values cannot), else the label value. Other annotations: `sluicegate.io/aliases`
(comma list), `sluicegate.io/upstream-model`, `sluicegate.io/port` (name or number; default the
Service port named `http`, else its only port) and `sluicegate.io/weight` (default 1). Services
with the same model name are one model, one pool each, named `<model>/<namespace>/<service>`.
Each Service is validated by the config file's own parser, so the rules are the same, and then
by gateway/discovery/trust.py: which namespaces may claim which names, and the highest weight.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.discovery.sink import DiscoverySink
from gateway.discovery.trust import ServiceTrust
from gateway.discovery.watch import JSON
from gateway.errors import ConfigError
from gateway.model_file import parse_model
from gateway.model_table import ModelConfig, PoolConfig

log = logging.getLogger("sluicegate.discovery")

MODEL_KEY = "sluicegate.io/model"
ALIASES_KEY = "sluicegate.io/aliases"
UPSTREAM_KEY = "sluicegate.io/upstream-model"
PORT_KEY = "sluicegate.io/port"
WEIGHT_KEY = "sluicegate.io/weight"


@dataclass(frozen=True)
class DiscoveredService:
    namespace: str
    service: str
    model: str
    aliases: tuple[str, ...]
    pool: PoolConfig


def service_pool(obj: JSON) -> DiscoveredService:
    """The pool one labelled Service stands for; ConfigError when it cannot be one."""
    metadata = _mapping(obj.get("metadata"))
    namespace, service = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
    labels, annotations = _mapping(metadata.get("labels")), _mapping(metadata.get("annotations"))
    model = annotations.get(MODEL_KEY) or labels.get(MODEL_KEY)
    if not model:
        raise ConfigError(f"label {MODEL_KEY} is empty and there is no annotation {MODEL_KEY}")
    aliases = [a.strip() for a in str(annotations.get(ALIASES_KEY) or "").split(",") if a.strip()]
    pool: dict[str, Any] = {
        "name": "service",
        "weight": _weight(annotations.get(WEIGHT_KEY)),
        "discovery": {
            "kubernetes": {
                "namespace": namespace,
                "service": service,
                "port": _port(annotations.get(PORT_KEY), _mapping(obj.get("spec")).get("ports")),
            }
        },
    }
    if UPSTREAM_KEY in annotations:
        pool["upstream_model"] = annotations[UPSTREAM_KEY]
    parsed = parse_model({"name": model, "aliases": aliases, "pools": [pool]}, "model")
    return DiscoveredService(
        namespace=namespace,
        service=service,
        model=parsed.name,
        aliases=parsed.aliases,
        pool=dataclasses.replace(parsed.pools[0], name=f"{parsed.name}/{namespace}/{service}"),
    )


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _weight(raw: Any) -> float:
    if raw is None:
        return 1.0
    try:
        weight = float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"annotation {WEIGHT_KEY}: expected a number, got {raw!r}") from None
    if not math.isfinite(weight) or weight <= 0:
        raise ConfigError(f"annotation {WEIGHT_KEY}: must be a positive number, got {raw!r}")
    return weight


def _port(annotation: Any, ports: Any) -> str | int:
    if annotation is not None:
        text = str(annotation).strip()
        return int(text) if text.isdigit() else text
    ports = [p for p in ports or () if isinstance(p, dict)]
    if any(p.get("name") == "http" for p in ports):
        return "http"
    if len(ports) != 1:
        raise ConfigError(f"no port: set annotation {PORT_KEY}, or name one of the Service's ports http")
    only = ports[0]
    if only.get("name"):
        return str(only["name"])
    # An unnamed port: its slices carry the target port's number.
    target = only.get("targetPort", only.get("port"))
    if isinstance(target, int) and not isinstance(target, bool):
        return target
    raise ConfigError(f"its only port is unnamed and targets a named port: set annotation {PORT_KEY}")


def build_models(
    services: Iterable[DiscoveredService], reserved: Collection[str]
) -> tuple[dict[str, ModelConfig], list[str]]:
    """The models the Services make, and a warning for each Service or alias left out.

    `reserved` are the names and aliases of the config file: those win. Between discovered
    models, a model's name wins over another's alias, and otherwise the first model (by name)."""
    by_model: dict[str, list[DiscoveredService]] = {}
    warnings: list[str] = []
    for found in sorted(services, key=lambda s: (s.model, s.namespace, s.service)):
        taken = [name for name in (found.model, *found.aliases) if name in reserved]
        if taken:
            warnings.append(
                f"Service {found.namespace}/{found.service} ignored: {taken[0]!r} is already a model "
                "name or alias in the config file"
            )
            continue
        by_model.setdefault(found.model, []).append(found)
    used: set[str] = set(by_model)
    models: dict[str, ModelConfig] = {}
    for name, members in by_model.items():
        aliases: list[str] = []
        for alias in sorted({a for m in members for a in m.aliases}):
            if alias in used:
                if alias != name:
                    warnings.append(f"model {name!r}: alias {alias!r} dropped, another model uses that name")
                continue
            used.add(alias)
            aliases.append(alias)
        pools = tuple(sorted((m.pool for m in members), key=lambda p: p.name))
        models[name] = ModelConfig(name=name, aliases=tuple(aliases), pools=pools)
    return models, warnings


class PoolFeeds(Protocol):
    def set_pool(self, pool: str, namespace: str, service: str, port: str | int) -> None: ...

    def remove_pool(self, pool: str) -> None: ...


class ServiceModels:
    """The labelled Services of every watched namespace, published to the sink as models; each
    model's pools are fed endpoints by `feeds`."""

    def __init__(
        self, sink: DiscoverySink, feeds: PoolFeeds, reserved: Collection[str], trust: ServiceTrust
    ) -> None:
        self._sink = sink
        self._feeds = feeds
        self._trust = trust
        self._reserved = frozenset(reserved)
        self._services: dict[tuple[str, str], DiscoveredService] = {}
        self._invalid: dict[tuple[str, str], str] = {}
        self._models: dict[str, ModelConfig] = {}
        self._warnings: set[str] = set()

    @property
    def models(self) -> dict[str, ModelConfig]:
        return dict(self._models)

    def store(self, namespace: str) -> NamespaceServices:
        return NamespaceServices(self, namespace)

    def replace_namespace(self, namespace: str, objects: list[JSON]) -> None:
        for key in [k for k in self._services if k[0] == namespace]:
            del self._services[key]
        seen = {(namespace, str(_mapping(obj.get("metadata")).get("name") or "")) for obj in objects}
        # Kept until re-taken, so a re-list (after every 410) does not repeat the same warnings.
        for key in [k for k in self._invalid if k[0] == namespace and k not in seen]:
            del self._invalid[key]
        for obj in objects:
            self._take(namespace, obj)
        self._publish()

    def apply(self, namespace: str, event_type: str, obj: JSON) -> None:
        if event_type == "DELETED":
            name = str(_mapping(obj.get("metadata")).get("name") or "")
            self._services.pop((namespace, name), None)
            self._invalid.pop((namespace, name), None)
        else:
            self._take(namespace, obj)
        self._publish()

    def _take(self, namespace: str, obj: JSON) -> None:
        metadata = _mapping(obj.get("metadata"))
        key = (namespace, str(metadata.get("name") or ""))
        self._services.pop(key, None)
        try:
            found = service_pool({**obj, "metadata": {**metadata, "namespace": namespace}})
        except ConfigError as exc:
            message = f"Service {key[0]}/{key[1]} skipped: {exc}"
        else:
            refusal = self._trust.refusal(namespace, (found.model, *found.aliases), found.pool.weight)
            if refusal is None:
                self._services[key] = found
                self._invalid.pop(key, None)
                return
            message = f"Service {key[0]}/{key[1]} ignored: {refusal}"
        # Once per distinct problem of a Service, however many events repeat it.
        if self._invalid.get(key) != message:
            log.warning("Kubernetes autodiscovery: %s", message)
        self._invalid[key] = message

    def _publish(self) -> None:
        models, warnings = build_models(self._services.values(), self._reserved)
        for warning in warnings:
            if warning not in self._warnings:
                log.warning("Kubernetes autodiscovery: %s", warning)
        self._warnings = set(warnings)
        old = self._models
        self._models = models
        for name in sorted(old.keys() - models.keys()):
            for pool in old[name].pools:
                self._feeds.remove_pool(pool.name)
            self._sink.remove_model(name)
            log.info("Kubernetes autodiscovery: model %r is gone", name)
        changed = [name for name in sorted(models) if name in old and old[name] != models[name]]
        added = [name for name in sorted(models) if name not in old]
        for name in changed + added:
            model = models[name]
            current = {pool.name for pool in model.pools}
            for pool in old[name].pools if name in old else ():
                if pool.name not in current:
                    self._feeds.remove_pool(pool.name)
            self._sink.add_model(model)
            for pool in model.pools:
                target = pool.kubernetes
                assert target is not None
                assert target.namespace is not None
                self._feeds.set_pool(pool.name, target.namespace, target.service, target.port)
            log.info(
                "Kubernetes autodiscovery: model %r %s with pools %s",
                name,
                "changed" if name in old else "found",
                ", ".join(pool.name for pool in model.pools),
            )


@dataclass
class NamespaceServices:
    """The watch Store of one namespace's labelled Services."""

    models: ServiceModels
    namespace: str

    def replace(self, objects: list[JSON]) -> None:
        self.models.replace_namespace(self.namespace, objects)

    def apply(self, event_type: str, obj: JSON) -> None:
        self.models.apply(self.namespace, event_type, obj)
