"""SLUICEGATE_REDIS_URL, checked at start: redis://, rediss:// (TLS), unix:// or
redis+sentinel://[[user]:password@]host1:26379,host2:26379/<service>[/<db>][?sentinel_password=...].

Errors never quote the URL: it may hold a password.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from redis.asyncio.connection import parse_url

from gateway.errors import ConfigError

SENTINEL_SCHEME = "redis+sentinel"
_DEFAULT_SENTINEL_PORT = 26379
_FIELD = "SLUICEGATE_REDIS_URL"


@dataclass(frozen=True)
class SentinelURL:
    hosts: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None


def parse_sentinel_url(url: str) -> SentinelURL:
    """Errors never quote the URL: it may hold a password."""
    scheme, sep, rest = url.partition("://")
    if scheme != SENTINEL_SCHEME or not sep:
        raise ConfigError(f"{_FIELD}: a Sentinel URL starts with {SENTINEL_SCHEME}://")
    # urlsplit cannot read a comma-separated host list (its .port would fail), so split by hand.
    netloc, _, path_and_query = rest.partition("/")
    path, _, query = path_and_query.partition("?")
    userinfo, at, hostlist = netloc.rpartition("@")
    username = password = None
    if at:
        user, _, secret = userinfo.partition(":")
        username, password = unquote(user) or None, unquote(secret) or None
    hosts = tuple(_host_port(h) for h in hostlist.split(","))
    parts = path.split("/") if path else []
    if not parts or not parts[0] or len(parts) > 2:
        raise ConfigError(f"{_FIELD}: name the Sentinel service: {SENTINEL_SCHEME}://HOSTS/SERVICE[/DB]")
    db = 0
    if len(parts) == 2:
        if not parts[1].isdigit():
            raise ConfigError(f"{_FIELD}: the database after the service name must be a number")
        db = int(parts[1])
    options = parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(options) - {"sentinel_password"})
    if unknown:
        raise ConfigError(f"{_FIELD}: unknown option {unknown[0]!r} (allowed: sentinel_password)")
    sentinel_password = options.get("sentinel_password", [""])[-1] or None
    return SentinelURL(hosts, unquote(parts[0]), db, username, password, sentinel_password)


def _host_port(item: str) -> tuple[str, int]:
    try:
        parts = urlsplit(f"//{item}")
        host, port = parts.hostname, parts.port
    except ValueError:
        host = None
    if not host:
        raise ConfigError(f"{_FIELD}: expected sentinels as host:port[,host:port...]")
    return host, port or _DEFAULT_SENTINEL_PORT


def validate_redis_url(url: str) -> None:
    scheme = urlsplit(url).scheme
    if scheme == SENTINEL_SCHEME:
        parse_sentinel_url(url)
        return
    if scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(f"{_FIELD}: must start with redis://, rediss://, unix:// or {SENTINEL_SCHEME}://")
    try:
        parse_url(url)
    except ValueError as exc:  # redis-py's messages name the part, never the password
        raise ConfigError(f"{_FIELD}: {exc}") from None
