"""The model table's file: parsed once at start from YAML into gateway/model_table.py's types.

A bad value raises a ConfigError that names the field (`models[1].pools[0].discovery.kubernetes.port`),
so an operator never finds a typo by watching requests fail. Unknown fields are errors for the same
reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from gateway.errors import ConfigError
from gateway.model_fields import boolean, model_name, names, number, require_mapping, upstream_model
from gateway.model_table import (
    FAIRNESS_MODES,
    NATIVE,
    NATIVE_APIS,
    POLICY_NAMES,
    TRANSLATE,
    HealthConfig,
    KubernetesTarget,
    ModelConfig,
    ModelTable,
    PoolConfig,
    PrefixConfig,
    Protocols,
    RoutingConfig,
    Timeouts,
)
from gateway.model_targets import TARGET_FIELDS, parse_pools, parse_target
from gateway.overflow.config import parse_overflow
from gateway.pricing import Price, parse_price
from gateway.proxy.engine_ids import ENGINE_ID_FIELDS


def load_model_table(path: str | Path) -> ModelTable:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_model_table(document)


def parse_model_table(document: Any) -> ModelTable:
    if document is None:
        document = {}
    require_mapping(document, "config", allowed={"models"})
    raw_models = document.get("models", [])
    if not isinstance(raw_models, list):
        raise ConfigError("models: expected a list")
    models = tuple(parse_model(raw, f"models[{i}]") for i, raw in enumerate(raw_models))
    seen: dict[str, str] = {}
    for i, model in enumerate(models):
        for j, name in enumerate((model.name, *model.aliases)):
            where = f"models[{i}].name" if j == 0 else f"models[{i}].aliases[{j - 1}]"
            if name in seen:
                raise ConfigError(f"{where}: {name!r} is already used by {seen[name]}")
            seen[name] = where
    for i, model in enumerate(models):
        for j, fallback in enumerate(model.fallbacks):
            if fallback not in seen or fallback in (model.name, *model.aliases):
                raise ConfigError(
                    f"models[{i}].fallbacks[{j}]: {fallback!r} is not another model of this table"
                )
    _one_currency(models)
    return ModelTable(models)


def _one_currency(models: tuple[ModelConfig, ...]) -> None:
    """Costs of different models are summed into a team's total, which only means something in
    one currency."""
    first: tuple[str, str] | None = None
    for where, price in _prices(models):
        if first is None:
            first = (where, price.currency)
        elif price.currency != first[1]:
            raise ConfigError(
                f"{where}.price.currency: {price.currency} differs from {first[0]}'s "
                f"{first[1]}: every price of the table is in one currency, so costs can be summed"
            )


def _prices(models: tuple[ModelConfig, ...]) -> Iterator[tuple[str, Price]]:
    """Every price of the table, its models' and their overflow providers', with where it is."""
    for i, model in enumerate(models):
        if model.price is not None:
            yield f"models[{i}]", model.price
        for j, provider in enumerate(model.overflow.providers if model.overflow else ()):
            yield f"models[{i}].overflow.providers[{j}]", provider.price


def parse_model(raw: Any, where: str) -> ModelConfig:
    """One model entry (also used for models found by Kubernetes autodiscovery)."""
    allowed = {
        "name",
        "aliases",
        "upstream_model",
        "timeouts",
        "pools",
        "fallbacks",
        "routing",
        "health",
        "continuous_usage",
        "protocols",
        "tokenize",
        "hosted_tools",
        "native_normalise",
        "price",
        "cache_isolation",
        "engine_fields",
        "max_logprobs",
        "engine_priority",
        "overflow",
        *_OUTPUT_FIELDS,
    }
    require_mapping(raw, where, allowed=allowed | TARGET_FIELDS)
    if "name" not in raw:
        raise ConfigError(f"{where}.name: required")
    name = model_name(raw["name"], f"{where}.name")
    given = [k for k in ("endpoints", "discovery", "pools") if k in raw]
    if len(given) != 1:
        raise ConfigError(
            f"{where}.endpoints: give exactly one of endpoints, discovery or pools"
            + (f" (got {', '.join(given)})" if given else "")
        )
    pools: tuple[PoolConfig, ...] = ()
    endpoints: tuple[str, ...] = ()
    kubernetes: KubernetesTarget | None = None
    if "pools" in raw:
        pools = parse_pools(raw["pools"], f"{where}.pools", name)
    else:
        endpoints, kubernetes = parse_target(raw, where)
    return ModelConfig(
        name=name,
        endpoints=endpoints,
        aliases=names(raw.get("aliases", []), f"{where}.aliases"),
        upstream_model=upstream_model(raw.get("upstream_model"), f"{where}.upstream_model"),
        timeouts=_parse_timeouts(raw.get("timeouts", {}), f"{where}.timeouts"),
        kubernetes=kubernetes,
        pools=pools,
        fallbacks=names(raw.get("fallbacks", []), f"{where}.fallbacks"),
        routing=_parse_routing(raw.get("routing", {}), f"{where}.routing"),
        health=_parse_health(raw.get("health", {}), f"{where}.health"),
        continuous_usage=boolean(raw.get("continuous_usage", True), f"{where}.continuous_usage"),
        protocols=_parse_protocols(raw.get("protocols", {}), f"{where}.protocols"),
        tokenize=boolean(raw.get("tokenize", False), f"{where}.tokenize"),
        hosted_tools=_hosted_tools(raw.get("hosted_tools", "drop"), f"{where}.hosted_tools"),
        native_normalise=boolean(raw.get("native_normalise", False), f"{where}.native_normalise"),
        max_output_tokens=_token_count(raw.get("max_output_tokens"), f"{where}.max_output_tokens"),
        context_window=_token_count(raw.get("context_window"), f"{where}.context_window"),
        default_max_tokens=_token_count(raw.get("default_max_tokens"), f"{where}.default_max_tokens"),
        price=parse_price(raw.get("price"), f"{where}.price"),
        cache_isolation=_cache_isolation(raw.get("cache_isolation", "team"), f"{where}.cache_isolation"),
        engine_fields=_engine_fields(raw.get("engine_fields", []), f"{where}.engine_fields"),
        max_logprobs=_max_logprobs(raw.get("max_logprobs", 5), f"{where}.max_logprobs"),
        engine_priority=boolean(raw.get("engine_priority", False), f"{where}.engine_priority"),
        overflow=parse_overflow(raw.get("overflow"), f"{where}.overflow"),
    )


CACHE_ISOLATIONS = ("team", "key", "shared")
_OUTPUT_FIELDS = ("max_output_tokens", "context_window", "default_max_tokens")
# What a request's token fields may hold (gateway.proxy.usage.MAX_TOKENS): a larger setting is a typo.
_MAX_TOKENS = 2**31 - 1


def _token_count(value: Any, where: str) -> int | None:
    if value is None:
        return None
    count: int = number(value, where, whole=True)
    if count > _MAX_TOKENS:
        raise ConfigError(f"{where}: must be at most {_MAX_TOKENS}")
    return count


def _cache_isolation(value: Any, where: str) -> str:
    if value not in CACHE_ISOLATIONS:
        raise ConfigError(f"{where}: expected one of {', '.join(CACHE_ISOLATIONS)}")
    return str(value)


_FIELD_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,63}")
# vLLM's own ceiling is its --max-logprobs (20 by default): a setting past this is a typo.
_MAX_LOGPROBS = 1000


def _engine_fields(value: Any, where: str) -> frozenset[str]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list of request field names")
    for i, name in enumerate(value):
        if not isinstance(name, str) or not _FIELD_NAME_RE.fullmatch(name):
            raise ConfigError(f"{where}[{i}]: expected a request field name (lower-case, digits, _)")
        if name in ENGINE_ID_FIELDS:  # they name state inside the engine (gateway/proxy/engine_ids.py)
            raise ConfigError(
                f"{where}[{i}]: {name} names state inside the engine and never reaches a worker"
            )
    return frozenset(value)


def _max_logprobs(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_LOGPROBS:
        raise ConfigError(f"{where}: expected a whole number from 0 to {_MAX_LOGPROBS}")
    return value


def _hosted_tools(value: Any, where: str) -> str:
    if value not in ("drop", "refuse"):
        raise ConfigError(f"{where}: expected drop or refuse")
    return str(value)


def _parse_protocols(raw: Any, where: str) -> Protocols:
    require_mapping(raw, where, allowed=set(NATIVE_APIS))
    for key, value in raw.items():
        if value not in (TRANSLATE, NATIVE):
            raise ConfigError(f"{where}.{key}: expected {TRANSLATE} or {NATIVE}")
    return Protocols(**raw)


def _parse_timeouts(raw: Any, where: str) -> Timeouts:
    require_mapping(raw, where, allowed={"connect", "first_token", "idle", "total", "stream_total"})
    return Timeouts(**{key: number(value, f"{where}.{key}") for key, value in raw.items()})


def _parse_routing(raw: Any, where: str) -> RoutingConfig:
    require_mapping(
        raw,
        where,
        allowed={
            "policy",
            "max_inflight_per_endpoint",
            "max_queue",
            "max_queue_wait",
            "prefix",
            "fairness",
            "batch_share",
        },
    )
    values: dict[str, Any] = {}
    if "policy" in raw:
        if raw["policy"] not in POLICY_NAMES:
            raise ConfigError(f"{where}.policy: expected one of {', '.join(POLICY_NAMES)}")
        values["policy"] = raw["policy"]
    for key in ("max_inflight_per_endpoint", "max_queue"):
        if key in raw:
            values[key] = number(raw[key], f"{where}.{key}", whole=True)
    if "max_queue_wait" in raw:
        values["max_queue_wait"] = number(raw["max_queue_wait"], f"{where}.max_queue_wait")
    if "prefix" in raw:
        values["prefix"] = _parse_prefix(raw["prefix"], f"{where}.prefix")
    if "batch_share" in raw:
        share = number(raw["batch_share"], f"{where}.batch_share")
        if share > 1:
            raise ConfigError(f"{where}.batch_share: a share of the pool's slots, from 0 to 1")
        values["batch_share"] = share
    if "fairness" in raw:
        if raw["fairness"] not in FAIRNESS_MODES:
            raise ConfigError(f"{where}.fairness: expected one of {', '.join(FAIRNESS_MODES)}")
        values["fairness"] = raw["fairness"]
    return RoutingConfig(**values)


def _parse_prefix(raw: Any, where: str) -> PrefixConfig:
    require_mapping(raw, where, allowed={"block_bytes", "max_extra_load"})
    values: dict[str, Any] = {}
    if "block_bytes" in raw:
        values["block_bytes"] = number(raw["block_bytes"], f"{where}.block_bytes", whole=True)
        if not 16 <= values["block_bytes"] <= 65536:
            raise ConfigError(f"{where}.block_bytes: must be from 16 to 65536")
    if "max_extra_load" in raw:
        values["max_extra_load"] = number(raw["max_extra_load"], f"{where}.max_extra_load")
    return PrefixConfig(**values)


_WHOLE_HEALTH_FIELDS = frozenset({"failures_to_eject", "teams_to_eject"})


def _parse_health(raw: Any, where: str) -> HealthConfig:
    require_mapping(
        raw,
        where,
        allowed={"failures_to_eject", "teams_to_eject", "ejection_base", "ejection_max", "probe_interval"},
    )
    values: dict[str, Any] = {}
    for key, value in raw.items():
        values[key] = number(value, f"{where}.{key}", whole=key in _WHOLE_HEALTH_FIELDS)
    health = HealthConfig(**values)
    if health.ejection_max < health.ejection_base:
        raise ConfigError(f"{where}.ejection_max: must be at least ejection_base")
    return health
