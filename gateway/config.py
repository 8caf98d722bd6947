"""Settings from the environment and the model table from one YAML file, validated once at start.

A bad value stops the gateway with a ConfigError that names the field (`models[1].endpoints[0].url`),
so an operator never finds a typo by watching requests fail.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$")


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Timeouts:
    """Seconds. `first_token` covers connect-to-first-event of a stream; `total` bounds a
    non-streaming answer, which arrives only when generation has finished."""

    connect: float = 2.0
    first_token: float = 60.0
    idle: float = 30.0
    total: float = 600.0


@dataclass(frozen=True)
class ModelConfig:
    name: str
    endpoints: tuple[str, ...]
    aliases: tuple[str, ...] = ()
    upstream_model: str | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)

    @property
    def wire_model(self) -> str:
        return self.upstream_model or self.name


@dataclass(frozen=True)
class ModelTable:
    models: tuple[ModelConfig, ...]

    def by_name(self) -> dict[str, ModelConfig]:
        """Every name a client may send (names and aliases) mapped to its model."""
        table: dict[str, ModelConfig] = {}
        for model in self.models:
            for name in (model.name, *model.aliases):
                table[name] = model
        return table


@dataclass(frozen=True)
class Settings:
    redis_url: str = "redis://127.0.0.1:6379/0"
    config_path: str | None = None
    admin_token: str | None = None
    host: str = "0.0.0.0"
    port: int = 8080
    max_body_bytes: int = 10 * 1024 * 1024
    key_cache_ttl_s: float = 1.0
    redis_timeout_s: float = 2.0
    redis_max_connections: int = 256
    log_level: str = "info"
    # Usage that could not reach Redis by shutdown waits here for the next start (gateway/spool.py).
    spool_path: str = field(
        default_factory=lambda: os.path.join(tempfile.gettempdir(), "sluicegate-usage.spool")
    )
    redis_fail_open: bool = False  # SLUICEGATE_REDIS_FAIL_MODE=fail_open: admit when Redis is down
    default_max_tokens: int = 1024  # reserved for output when a request sets no max_tokens

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        defaults = cls()

        def number(name: str, default: float, cast: type[int] | type[float]) -> Any:
            raw = env.get(name)
            if raw is None or raw == "":
                return default
            try:
                value = cast(raw)
            except ValueError:
                raise ConfigError(f"{name}: expected a number, got {raw!r}") from None
            if value <= 0:
                raise ConfigError(f"{name}: must be positive, got {raw!r}")
            return value

        from gateway.redis_conn import validate_redis_url  # it imports this module

        redis_url = env.get("SLUICEGATE_REDIS_URL") or defaults.redis_url
        validate_redis_url(redis_url)
        fail_mode = (env.get("SLUICEGATE_REDIS_FAIL_MODE") or "fail_closed").lower()
        if fail_mode not in ("fail_closed", "fail_open"):
            raise ConfigError("SLUICEGATE_REDIS_FAIL_MODE: must be fail_closed or fail_open")
        port = number("SLUICEGATE_PORT", defaults.port, int)
        if port > 65535:
            raise ConfigError(f"SLUICEGATE_PORT: not a TCP port: {port}")
        return cls(
            redis_url=redis_url,
            config_path=env.get("SLUICEGATE_CONFIG") or None,
            admin_token=env.get("SLUICEGATE_ADMIN_TOKEN") or None,
            host=env.get("SLUICEGATE_HOST") or defaults.host,
            port=port,
            max_body_bytes=number("SLUICEGATE_MAX_BODY_BYTES", defaults.max_body_bytes, int),
            key_cache_ttl_s=number("SLUICEGATE_KEY_CACHE_TTL", defaults.key_cache_ttl_s, float),
            redis_timeout_s=number("SLUICEGATE_REDIS_TIMEOUT", defaults.redis_timeout_s, float),
            redis_max_connections=number(
                "SLUICEGATE_REDIS_MAX_CONNECTIONS", defaults.redis_max_connections, int
            ),
            log_level=(env.get("SLUICEGATE_LOG_LEVEL") or defaults.log_level).lower(),
            redis_fail_open=fail_mode == "fail_open",
            default_max_tokens=number("SLUICEGATE_DEFAULT_MAX_TOKENS", defaults.default_max_tokens, int),
            spool_path=env.get("SLUICEGATE_SPOOL_PATH") or defaults.spool_path,
        )


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
    _require_mapping(document, "config", allowed={"models"})
    raw_models = document.get("models", [])
    if not isinstance(raw_models, list):
        raise ConfigError("models: expected a list")
    models = tuple(_parse_model(raw, f"models[{i}]") for i, raw in enumerate(raw_models))
    seen: dict[str, str] = {}
    for i, model in enumerate(models):
        for j, name in enumerate((model.name, *model.aliases)):
            where = f"models[{i}].name" if j == 0 else f"models[{i}].aliases[{j - 1}]"
            if name in seen:
                raise ConfigError(f"{where}: {name!r} is already used by {seen[name]}")
            seen[name] = where
    return ModelTable(models)


def _require_mapping(value: Any, where: str, *, allowed: set[str]) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping")
    unknown = sorted(str(key) for key in value if key not in allowed)
    if unknown:
        prefix = "" if where == "config" else f"{where}."
        raise ConfigError(f"{prefix}{unknown[0]}: unknown field (allowed: {', '.join(sorted(allowed))})")


def _model_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not MODEL_NAME_RE.match(value):
        raise ConfigError(
            f"{where}: expected a model name (letters, digits and ._:/@+-, at most 128 characters)"
        )
    return value


def _parse_model(raw: Any, where: str) -> ModelConfig:
    _require_mapping(raw, where, allowed={"name", "aliases", "upstream_model", "endpoints", "timeouts"})
    if "name" not in raw:
        raise ConfigError(f"{where}.name: required")
    name = _model_name(raw["name"], f"{where}.name")
    aliases_raw = raw.get("aliases", [])
    if not isinstance(aliases_raw, list):
        raise ConfigError(f"{where}.aliases: expected a list of names")
    aliases = tuple(_model_name(a, f"{where}.aliases[{i}]") for i, a in enumerate(aliases_raw))
    upstream = raw.get("upstream_model")
    if upstream is not None and (not isinstance(upstream, str) or not upstream.strip()):
        raise ConfigError(f"{where}.upstream_model: expected a non-empty string")
    endpoints_raw = raw.get("endpoints")
    if not isinstance(endpoints_raw, list) or not endpoints_raw:
        raise ConfigError(f"{where}.endpoints: expected a non-empty list of {{url: ...}}")
    endpoints = tuple(_parse_endpoint(e, f"{where}.endpoints[{i}]") for i, e in enumerate(endpoints_raw))
    if len(set(endpoints)) != len(endpoints):
        raise ConfigError(f"{where}.endpoints: the same url is listed twice")
    timeouts = _parse_timeouts(raw.get("timeouts", {}), f"{where}.timeouts")
    return ModelConfig(
        name=name, endpoints=endpoints, aliases=aliases, upstream_model=upstream, timeouts=timeouts
    )


def _parse_endpoint(raw: Any, where: str) -> str:
    _require_mapping(raw, where, allowed={"url"})
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


def _parse_timeouts(raw: Any, where: str) -> Timeouts:
    names = {"connect", "first_token", "idle", "total"}
    _require_mapping(raw, where, allowed=names)
    values: dict[str, float] = {}
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}.{key}: expected seconds as a number")
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{where}.{key}: must be a positive number of seconds")
        values[key] = float(value)
    return Timeouts(**values)
