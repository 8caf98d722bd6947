"""A model's `overflow` section of the model file: its types and their parse, which names the bad
field as the rest of gateway/model_file.py does.

    overflow:
      after_ms: 3000          # overflow when the expected queue wait exceeds this (or the deadline)
      max_concurrency: 32     # requests at each provider at once, from this replica
      providers:
        - name: cloud
          url: https://api.provider.example/v1
          model: provider-model-name
          key_env: CLOUD_API_KEY              # or key_file: /var/run/secrets/...
          ca_file: /etc/ssl/provider-ca.pem   # optional: else the system store (SSL_CERT_FILE)
          price: {input_per_million: "3.00", output_per_million: "15.00"}

The key itself is read when the gateway starts (gateway/overflow/providers.py), not here:
`check-config` runs where the Secret may not be mounted.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gateway.errors import ConfigError
from gateway.pricing import Price, parse_price

# A provider's name is a metric label and part of `x-sluicegate-served-by`: short and plain.
PROVIDER_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_MAX_AFTER_MS = 3_600_000
_MAX_CONCURRENCY = 100_000
MAX_PROVIDERS = 8


@dataclass(frozen=True)
class ProviderConfig:
    name: str
    url: str  # the provider's base URL, e.g. https://api.openai.com/v1 (chat is `<url>/chat/completions`)
    model: str  # the model name the provider knows
    price: Price
    key_env: str | None = None
    key_file: str | None = None
    ca_file: str | None = None


@dataclass(frozen=True)
class OverflowConfig:
    after_ms: int
    max_concurrency: int
    providers: tuple[ProviderConfig, ...]


def parse_overflow(raw: Any, where: str) -> OverflowConfig | None:
    if raw is None:
        return None
    _mapping(raw, where, {"after_ms", "max_concurrency", "providers"})
    after_ms = _whole(raw.get("after_ms"), f"{where}.after_ms", 0, _MAX_AFTER_MS)
    concurrency = _whole(raw.get("max_concurrency"), f"{where}.max_concurrency", 1, _MAX_CONCURRENCY)
    providers_raw = raw.get("providers")
    if not isinstance(providers_raw, list) or not providers_raw:
        raise ConfigError(f"{where}.providers: expected a non-empty list of providers")
    if len(providers_raw) > MAX_PROVIDERS:
        raise ConfigError(f"{where}.providers: at most {MAX_PROVIDERS} providers")
    providers = tuple(_provider(p, f"{where}.providers[{i}]") for i, p in enumerate(providers_raw))
    names = [p.name for p in providers]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}.providers: two providers have the same name")
    return OverflowConfig(after_ms, concurrency, providers)


def _provider(raw: Any, where: str) -> ProviderConfig:
    _mapping(raw, where, {"name", "url", "model", "key_env", "key_file", "ca_file", "price"})
    name = raw.get("name")
    if not isinstance(name, str) or not PROVIDER_NAME_RE.fullmatch(name):
        raise ConfigError(f"{where}.name: required, lower-case letters, digits and '-' (at most 32)")
    model = raw.get("model")
    if not isinstance(model, str) or not model.strip() or len(model) > 256:
        raise ConfigError(f"{where}.model: required, the model name the provider knows")
    key_env, key_file = raw.get("key_env"), raw.get("key_file")
    if (key_env is None) == (key_file is None):
        raise ConfigError(f"{where}.key_env: give exactly one of key_env or key_file (the API key)")
    if key_env is not None and (not isinstance(key_env, str) or not _ENV_RE.fullmatch(key_env)):
        raise ConfigError(f"{where}.key_env: expected an environment variable's name")
    if key_file is not None and (not isinstance(key_file, str) or not key_file.startswith("/")):
        raise ConfigError(f"{where}.key_file: expected an absolute path")
    ca_file = raw.get("ca_file")
    if ca_file is not None and (not isinstance(ca_file, str) or not ca_file.startswith("/")):
        raise ConfigError(f"{where}.ca_file: expected an absolute path to a PEM file")
    if "price" not in raw:
        raise ConfigError(f"{where}.price: required: what the provider charges is what its usage costs")
    price = parse_price(raw["price"], f"{where}.price")
    assert price is not None
    return ProviderConfig(
        name=name,
        url=_url(raw.get("url"), f"{where}.url"),
        model=model,
        price=price,
        key_env=key_env,
        key_file=key_file,
        ca_file=ca_file,
    )


def _url(url: Any, where: str) -> str:
    """HTTPS: the key and the prompts cross the network to another company. Plain HTTP only to
    this machine (a test's provider, a local sidecar that holds the TLS itself)."""
    if not isinstance(url, str):
        raise ConfigError(f"{where}: required, the provider's https:// base URL")
    if not url.isascii() or not url.isprintable() or " " in url:
        # It is written into the request line: urlsplit drops line breaks, the request would not.
        raise ConfigError(f"{where}: expected a URL without spaces, line breaks or non-ASCII characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}: expected an https:// URL, got {url!r}")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise ConfigError(f"{where}: must be https:// (plain http only to a loopback address), got {url!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigError(f"{where}: give the base URL only (no query, fragment or credentials)")
    try:
        parts.port  # noqa: B018 -- urlsplit validates the port lazily
    except ValueError:
        raise ConfigError(f"{where}: bad port in {url!r}") from None
    return url.rstrip("/")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _mapping(raw: Any, where: str, allowed: set[str]) -> None:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping")
    unknown = sorted(str(k) for k in raw if k not in allowed)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown field (allowed: {', '.join(sorted(allowed))})")


def _whole(value: Any, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{where}: required, a whole number from {low} to {high}")
    return value
