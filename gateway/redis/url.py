"""SLUICEGATE_REDIS_URL, checked at start: redis://, rediss:// (TLS), unix://,
redis+sentinel://[[user]:password@]host1:26379,host2:26379/<service>[/<db>][?sentinel_password=...]
or redis+cluster://[[user]:password@]host1:6379,host2:6379/ (rediss+cluster:// for TLS).

Errors never quote the URL: it may hold a password.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from redis.asyncio.connection import parse_url

from gateway.errors import ConfigError

SENTINEL_SCHEME = "redis+sentinel"
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
_DEFAULT_SENTINEL_PORT = 26379
_DEFAULT_REDIS_PORT = 6379
_FIELD = "SLUICEGATE_REDIS_URL"


@dataclass(frozen=True)
class SentinelURL:
    hosts: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None


@dataclass(frozen=True)
class ClusterURL:
    """Seed nodes only: the client asks them for the whole topology (and asks again after MOVED)."""

    hosts: tuple[tuple[str, int], ...]
    tls: bool = False
    username: str | None = None
    password: str | None = None


def parse_cluster_url(url: str) -> ClusterURL:
    """A cluster has one database (0) and no options here; anything after the hosts is refused
    rather than silently ignored."""
    scheme, sep, rest = url.partition("://")
    if scheme not in CLUSTER_SCHEMES or not sep:
        raise ConfigError(f"{_FIELD}: a Redis Cluster URL starts with redis+cluster:// or rediss+cluster://")
    netloc, _, path_and_query = rest.partition("/")
    if path_and_query.strip("/") not in ("", "0"):
        raise ConfigError(
            f"{_FIELD}: a Redis Cluster URL names seed nodes only: redis+cluster://HOST:PORT[,HOST:PORT...]/"
        )
    username, password, hostlist = _userinfo(netloc)
    hosts = tuple(_host_port(h, _DEFAULT_REDIS_PORT, "cluster nodes") for h in hostlist.split(","))
    return ClusterURL(hosts, scheme == "rediss+cluster", username, password)


def _userinfo(netloc: str) -> tuple[str | None, str | None, str]:
    userinfo, at, hostlist = netloc.rpartition("@")
    if not at:
        return None, None, hostlist
    user, _, secret = userinfo.partition(":")
    return unquote(user) or None, unquote(secret) or None, hostlist


def parse_sentinel_url(url: str) -> SentinelURL:
    """Errors never quote the URL: it may hold a password."""
    scheme, sep, rest = url.partition("://")
    if scheme != SENTINEL_SCHEME or not sep:
        raise ConfigError(f"{_FIELD}: a Sentinel URL starts with {SENTINEL_SCHEME}://")
    # urlsplit cannot read a comma-separated host list (its .port would fail), so split by hand.
    netloc, _, path_and_query = rest.partition("/")
    path, _, query = path_and_query.partition("?")
    username, password, hostlist = _userinfo(netloc)
    hosts = tuple(_host_port(h, _DEFAULT_SENTINEL_PORT, "sentinels") for h in hostlist.split(","))
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


def _host_port(item: str, default_port: int, what: str) -> tuple[str, int]:
    try:
        parts = urlsplit(f"//{item}")
        host, port = parts.hostname, parts.port
    except ValueError:
        host = None
    if not host:
        raise ConfigError(f"{_FIELD}: expected {what} as host:port[,host:port...]")
    return host, port or default_port


def validate_redis_url(url: str) -> None:
    scheme = urlsplit(url).scheme
    if scheme == SENTINEL_SCHEME:
        parse_sentinel_url(url)
        return
    if scheme in CLUSTER_SCHEMES:
        parse_cluster_url(url)
        return
    if scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(
            f"{_FIELD}: must start with redis://, rediss://, unix://, {SENTINEL_SCHEME}:// or redis+cluster://"
        )
    try:
        parse_url(url)
    except ValueError as exc:  # redis-py's messages name the part, never the password
        raise ConfigError(f"{_FIELD}: {exc}") from None
