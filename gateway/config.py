"""Settings from the environment, validated once at start; the model table is gateway.model_table.

A bad value stops the gateway with a ConfigError that names the variable, so an operator never
finds a typo by watching requests fail.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.discovery.trust import (
    DEFAULT_MAX_WEIGHT,
    ModelNamespaces,
    parse_max_weight,
    parse_model_namespaces,
)
from gateway.errors import ConfigError
from gateway.identity.oidc import MIN_REFETCH_S, OidcSettings
from gateway.observability.logs import LOG_FORMATS
from gateway.observability.tracing import TracingConfig
from gateway.redis.url import validate_redis_url

_NAMESPACE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
MIN_ADMIN_TOKEN_LENGTH = 32


@dataclass(frozen=True)
class Settings:
    redis_url: str = "redis://127.0.0.1:6379/0"
    config_path: str | None = None
    admin_token: str | None = None
    # Wrong admin tokens from one address before its wrong tokens get 429 (gateway/admin/throttle.py).
    admin_max_failures: int = 10
    host: str = "0.0.0.0"
    port: int = 8080
    # SLUICEGATE_ADMIN_PORT: the admin API, console and /metrics answer on this second listener
    # only, the client APIs on `port` only (gateway/edge/planes.py); None: everything on `port`.
    admin_port: int | None = None
    # SLUICEGATE_CACHE_SALT_SECRET: what every team's vLLM cache_salt is derived with, the same on
    # every replica; None: one minted once into Redis (gateway/proxy/cache_salt.py).
    cache_salt_secret: str | None = None
    # SLUICEGATE_METRICS_TOKEN: /metrics then wants `Authorization: Bearer <token>` (it names
    # teams and worker URLs); None: open, as Prometheus scrapes by default.
    metrics_token: str | None = None
    # SLUICEGATE_SCIM_TOKEN: the IdP's bearer for /scim/v2 (gateway/scim/); None: SCIM is off and
    # the directory is neither served nor consulted.
    scim_token: str | None = None
    max_body_bytes: int = 10 * 1024 * 1024
    # What one body may hold, refused with a 400 before anything walks it: the byte limit alone lets
    # 240,000 tiny messages cost the event loop half a second (gateway/proxy/translation/bounds.py).
    max_messages: int = 20_000  # messages / input items / contents
    max_content_parts: int = 2_000  # in one message
    max_tools: int = 2_000
    # JSON values (objects, arrays, strings) one body may hold, estimated from its bytes and
    # refused with a 413 before the parse, which holds the loop (gateway/proxy/translation/bounds.py).
    max_body_values: int = 200_000
    key_cache_ttl_s: float = 1.0
    redis_timeout_s: float = 2.0
    redis_max_connections: int = 256
    # A concurrency slot's lease: renewed while its request runs (gateway/limits/leases.py), so
    # this is how long a replica that died keeps its slots taken.
    concurrency_lease_s: float = 60.0
    log_level: str = "info"
    log_format: str = "text"  # SLUICEGATE_LOG_FORMAT: text or json (gateway/observability/logs.py)
    # OpenTelemetry export from the standard OTEL_* variables; None: tracing off (tracing.py).
    tracing: TracingConfig | None = None
    # Usage that could not reach Redis by shutdown waits here for the next start (gateway/metering/spool.py).
    spool_path: str = field(default_factory=lambda: default_spool_path(os.environ))
    redis_fail_open: bool = False  # SLUICEGATE_REDIS_FAIL_MODE=fail_open: admit when Redis is down
    default_max_tokens: int = 1024  # reserved for output when a request sets no max_tokens
    # Services labelled sluicegate.io/model=<name> become model pools (gateway/discovery/).
    kubernetes_autodiscovery: bool = False
    kubernetes_namespaces: tuple[str, ...] = ()  # empty: the namespace the gateway runs in
    # Outside a pod, discovery reads this kubeconfig (standard KUBECONFIG; default ~/.kube/config).
    kubeconfig: str | None = None
    # Bounds on what one client connection may hold (gateway/edge/; docs/limits.md, "Limits and timeouts").
    max_header_bytes: int = 32 * 1024  # the whole request head; more gets 431 and a close
    header_timeout_s: float = 10.0  # a connection must complete its request head within this
    body_timeout_s: float = 30.0  # the whole request body must arrive within this: 408
    keep_alive_timeout_s: float = 5.0  # uvicorn's idle time between requests on one connection
    # Client connections at once; more get 503 and a close. 0: below the descriptor limit (edge/server.py).
    max_connections: int = 0
    # A worker SSE event larger than this ends the stream with an error event (gateway/proxy/relay.py).
    max_event_bytes: int = 1024 * 1024
    # The bytes of whole (non-streamed) answers one replica holds at once, all requests together;
    # an answer that would pass it is cut and answered 503 server_busy (gateway/proxy/answer_bytes.py).
    # The memory they take is about twice this (an answer's bytes, then its parsed form beside them).
    max_buffered_answer_bytes: int = 128 * 1024 * 1024
    # After SIGTERM: /readyz fails at once and serving goes on this long (so Kubernetes takes the
    # pod out of its Service first), then open requests get up to drain_timeout_s (gateway/drain.py).
    shutdown_delay_s: float = 5.0
    drain_timeout_s: float = 30.0
    # A stream quiet this long gets its API's keep-alive event (Anthropic's `ping`).
    stream_ping_interval_s: float = 15.0
    # A stream's write that the client leaves unread this long (or the model's `idle`, if shorter)
    # cuts the client and the worker: a reader that stopped must not leave the engine generating
    # unbilled for `idle` (gateway/proxy/relay.py).
    client_write_stall_s: float = 5.0
    # Peers whose X-Forwarded-For the gateway extends instead of replacing (IPs or CIDRs).
    trusted_proxies: tuple[str, ...] = ()
    # People on the admin plane (gateway/identity/, docs/access.md): the IdP whose access tokens
    # the admin API takes (SLUICEGATE_OIDC_*); None: the admin token alone.
    oidc: OidcSettings | None = None
    # The console's sign-in through the IdP (gateway/console/sso.py): its confidential client, and
    # the public address the IdP sends people back to (SLUICEGATE_PUBLIC_URL; else the request's).
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = None
    public_url: str | None = None
    # `sluicegate login`'s public client (GET /admin/v1/oidc tells the CLI).
    oidc_cli_client_id: str | None = None
    # SLUICEGATE_SESSION_SECRET: what console session cookies are signed with; None: one minted
    # once into Redis (gateway/redis/shared_secret.py).
    session_secret: str | None = None
    # Which namespaces may serve which autodiscovered model; a model with no entry only the
    # gateway's own namespace. Weights above the cap refuse the Service (gateway/discovery/trust.py).
    kubernetes_model_namespaces: ModelNamespaces = ()
    kubernetes_max_weight: float = DEFAULT_MAX_WEIGHT
    # How long the gateway remembers which endpoint holds a response a native Responses pool
    # stored, and whose it is (gateway/routing/stored_responses.py).
    stored_response_ttl_s: float = 7 * 24 * 3600.0
    # The admin audit log keeps about this many entries, oldest out first (gateway/admin/audit.py).
    audit_max_entries: int = 100_000
    # A web console sign-in lasts this long (gateway/console/session.py); SLUICEGATE_CONSOLE_SESSION_TTL.
    console_session_ttl_s: float = 8 * 3600.0
    # prefix_affinity's index of which endpoint served which prompt block (gateway/routing/prefix.py)
    # holds at most this many blocks; replicas share it through Redis every interval (0: not shared).
    prefix_index_blocks: int = 200_000
    prefix_share_interval_s: float = 0.05
    # How often the replica holding the export lease sets each team's monthly money budget gauge
    # (gateway/metering/budget_gauge.py); SLUICEGATE_BUDGET_EXPORT_INTERVAL.
    budget_export_interval_s: float = 30.0
    # SLUICEGATE_FILES_URL: where the Files and Batch API keeps bytes (file:///path, s3://...;
    # gateway/files/backends.py); None: the batch routes answer a 404 naming the setting.
    files_url: str | None = None
    # Files and batches are kept this long after creation (SLUICEGATE_FILES_RETENTION_S).
    files_retention_s: float = 30 * 24 * 3600.0
    # A batch line's claim on one replica (gateway/batch/batchstore.py): renewed while it runs, so
    # this is how long a line of a replica that died waits before another replica runs it again.
    batch_lease_s: float = 30.0
    # How often an idle replica looks for batch lines to start (SLUICEGATE_BATCH_POLL_INTERVAL).
    batch_poll_interval_s: float = 0.2

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        defaults = cls()

        def number(name: str, default: float, cast: type[int] | type[float], *, zero: bool = False) -> Any:
            raw = env.get(name)
            if raw is None or raw == "":
                return default
            try:
                value = cast(raw)
            except ValueError:
                raise ConfigError(f"{name}: expected a number, got {raw!r}") from None
            if not (value >= 0 if zero else value > 0) or value != value:
                raise ConfigError(f"{name}: must be {'zero or more' if zero else 'positive'}, got {raw!r}")
            return value

        redis_url = env.get("SLUICEGATE_REDIS_URL") or defaults.redis_url
        validate_redis_url(redis_url)
        fail_mode = (env.get("SLUICEGATE_REDIS_FAIL_MODE") or "fail_closed").lower()
        if fail_mode not in ("fail_closed", "fail_open"):
            raise ConfigError("SLUICEGATE_REDIS_FAIL_MODE: must be fail_closed or fail_open")
        autodiscovery = (env.get("SLUICEGATE_KUBERNETES_AUTODISCOVERY") or "false").lower()
        if autodiscovery not in ("true", "false", "1", "0"):
            raise ConfigError("SLUICEGATE_KUBERNETES_AUTODISCOVERY: must be true or false")
        namespaces = tuple(
            n.strip() for n in (env.get("SLUICEGATE_KUBERNETES_NAMESPACES") or "").split(",") if n.strip()
        )
        for namespace in namespaces:
            if not _NAMESPACE_RE.fullmatch(namespace):
                raise ConfigError(f"SLUICEGATE_KUBERNETES_NAMESPACES: not a namespace name: {namespace!r}")
        port = number("SLUICEGATE_PORT", defaults.port, int)
        if port > 65535:
            raise ConfigError(f"SLUICEGATE_PORT: not a TCP port: {port}")
        admin_port = number("SLUICEGATE_ADMIN_PORT", 0, int, zero=True) or None
        if admin_port is not None and (admin_port > 65535 or admin_port == port):
            raise ConfigError(
                f"SLUICEGATE_ADMIN_PORT: must be a TCP port other than SLUICEGATE_PORT, got {admin_port}"
            )
        admin_token = env.get("SLUICEGATE_ADMIN_TOKEN") or None
        # Short enough to guess is short enough to be guessed; the message never shows the value.
        if admin_token is not None and len(admin_token) < MIN_ADMIN_TOKEN_LENGTH:
            raise ConfigError(
                f"SLUICEGATE_ADMIN_TOKEN: must be at least {MIN_ADMIN_TOKEN_LENGTH} characters, "
                f"got {len(admin_token)} (e.g. `openssl rand -hex 24`)"
            )

        def secret(name: str) -> str | None:
            value = env.get(name) or None
            if value is not None and len(value) < MIN_ADMIN_TOKEN_LENGTH:  # never shows the value
                raise ConfigError(f"{name}: must be at least {MIN_ADMIN_TOKEN_LENGTH} characters")
            return value

        return cls(
            redis_url=redis_url,
            config_path=env.get("SLUICEGATE_CONFIG") or None,
            admin_token=admin_token,
            cache_salt_secret=secret("SLUICEGATE_CACHE_SALT_SECRET"),
            metrics_token=secret("SLUICEGATE_METRICS_TOKEN"),
            scim_token=secret("SLUICEGATE_SCIM_TOKEN"),
            admin_max_failures=number("SLUICEGATE_ADMIN_MAX_FAILURES", defaults.admin_max_failures, int),
            host=env.get("SLUICEGATE_HOST") or defaults.host,
            port=port,
            admin_port=admin_port,
            max_body_bytes=number("SLUICEGATE_MAX_BODY_BYTES", defaults.max_body_bytes, int),
            key_cache_ttl_s=number("SLUICEGATE_KEY_CACHE_TTL", defaults.key_cache_ttl_s, float),
            redis_timeout_s=number("SLUICEGATE_REDIS_TIMEOUT", defaults.redis_timeout_s, float),
            redis_max_connections=number(
                "SLUICEGATE_REDIS_MAX_CONNECTIONS", defaults.redis_max_connections, int
            ),
            concurrency_lease_s=number("SLUICEGATE_CONCURRENCY_LEASE", defaults.concurrency_lease_s, float),
            log_level=(env.get("SLUICEGATE_LOG_LEVEL") or defaults.log_level).lower(),
            log_format=_log_format(env.get("SLUICEGATE_LOG_FORMAT") or defaults.log_format),
            tracing=TracingConfig.from_env(env),
            redis_fail_open=fail_mode == "fail_open",
            default_max_tokens=number("SLUICEGATE_DEFAULT_MAX_TOKENS", defaults.default_max_tokens, int),
            spool_path=env.get("SLUICEGATE_SPOOL_PATH") or default_spool_path(env),
            kubernetes_autodiscovery=autodiscovery in ("true", "1"),
            kubernetes_namespaces=namespaces,
            kubeconfig=env.get("KUBECONFIG") or None,
            max_header_bytes=number("SLUICEGATE_MAX_HEADER_BYTES", defaults.max_header_bytes, int),
            header_timeout_s=number("SLUICEGATE_HEADER_TIMEOUT", defaults.header_timeout_s, float),
            body_timeout_s=number("SLUICEGATE_BODY_TIMEOUT", defaults.body_timeout_s, float),
            keep_alive_timeout_s=number(
                "SLUICEGATE_KEEP_ALIVE_TIMEOUT", defaults.keep_alive_timeout_s, float
            ),
            max_event_bytes=number("SLUICEGATE_MAX_EVENT_BYTES", defaults.max_event_bytes, int),
            max_buffered_answer_bytes=number(
                "SLUICEGATE_MAX_BUFFERED_ANSWER_BYTES", defaults.max_buffered_answer_bytes, int
            ),
            max_connections=number("SLUICEGATE_MAX_CONNECTIONS", defaults.max_connections, int, zero=True),
            shutdown_delay_s=number("SLUICEGATE_SHUTDOWN_DELAY", defaults.shutdown_delay_s, float, zero=True),
            drain_timeout_s=number("SLUICEGATE_DRAIN_TIMEOUT", defaults.drain_timeout_s, float, zero=True),
            stream_ping_interval_s=number(
                "SLUICEGATE_STREAM_PING_INTERVAL", defaults.stream_ping_interval_s, float
            ),
            max_messages=number("SLUICEGATE_MAX_MESSAGES", defaults.max_messages, int),
            max_content_parts=number("SLUICEGATE_MAX_CONTENT_PARTS", defaults.max_content_parts, int),
            max_tools=number("SLUICEGATE_MAX_TOOLS", defaults.max_tools, int),
            max_body_values=number("SLUICEGATE_MAX_BODY_VALUES", defaults.max_body_values, int),
            client_write_stall_s=number(
                "SLUICEGATE_CLIENT_WRITE_STALL", defaults.client_write_stall_s, float
            ),
            stored_response_ttl_s=number(
                "SLUICEGATE_STORED_RESPONSE_TTL", defaults.stored_response_ttl_s, float
            ),
            audit_max_entries=number("SLUICEGATE_AUDIT_MAX_ENTRIES", defaults.audit_max_entries, int),
            console_session_ttl_s=number(
                "SLUICEGATE_CONSOLE_SESSION_TTL", defaults.console_session_ttl_s, float
            ),
            prefix_index_blocks=number("SLUICEGATE_PREFIX_INDEX_BLOCKS", defaults.prefix_index_blocks, int),
            prefix_share_interval_s=number(
                "SLUICEGATE_PREFIX_SHARE_INTERVAL", defaults.prefix_share_interval_s, float, zero=True
            ),
            budget_export_interval_s=number(
                "SLUICEGATE_BUDGET_EXPORT_INTERVAL", defaults.budget_export_interval_s, float
            ),
            trusted_proxies=_trusted_proxies(env.get("SLUICEGATE_TRUSTED_PROXIES") or ""),
            oidc=_oidc(env),
            oidc_client_id=env.get("SLUICEGATE_OIDC_CLIENT_ID") or None,
            oidc_client_secret=env.get("SLUICEGATE_OIDC_CLIENT_SECRET") or None,
            public_url=_public_url(env.get("SLUICEGATE_PUBLIC_URL") or None),
            oidc_cli_client_id=env.get("SLUICEGATE_OIDC_CLI_CLIENT_ID") or None,
            session_secret=secret("SLUICEGATE_SESSION_SECRET"),
            kubernetes_model_namespaces=parse_model_namespaces(
                env.get("SLUICEGATE_KUBERNETES_MODEL_NAMESPACES") or ""
            ),
            kubernetes_max_weight=parse_max_weight(env.get("SLUICEGATE_KUBERNETES_MAX_WEIGHT")),
            files_url=env.get("SLUICEGATE_FILES_URL") or None,
            files_retention_s=number("SLUICEGATE_FILES_RETENTION_S", defaults.files_retention_s, float),
            batch_lease_s=number("SLUICEGATE_BATCH_LEASE", defaults.batch_lease_s, float),
            batch_poll_interval_s=number(
                "SLUICEGATE_BATCH_POLL_INTERVAL", defaults.batch_poll_interval_s, float
            ),
        )


def default_spool_path(env: Mapping[str, str]) -> str:
    """The user's own state directory (XDG_STATE_HOME, else ~/.local/state), never the system
    temp dir: a file another user planted there would be replayed into the budgets at start."""
    state = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "sluicegate", "usage.spool")


def _log_format(raw: str) -> str:
    value = raw.strip().lower()
    if value not in LOG_FORMATS:
        raise ConfigError(f"SLUICEGATE_LOG_FORMAT: must be {' or '.join(LOG_FORMATS)}, got {raw!r}")
    return value


def _trusted_proxies(raw: str) -> tuple[str, ...]:
    """Comma-separated IPs or CIDRs, each checked here so a typo stops the start."""
    entries = tuple(part.strip() for part in raw.split(",") if part.strip())
    for entry in entries:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ConfigError(f"SLUICEGATE_TRUSTED_PROXIES: not an IP or CIDR: {entry!r}") from None
    return entries


_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_CLAIM_RE = re.compile(r"[A-Za-z0-9_:.-]{1,100}")


def _oidc(env: Mapping[str, str]) -> OidcSettings | None:
    """SLUICEGATE_OIDC_*: an https issuer (http only on loopback, for tests and laptops), and the
    admin API's audience, which defaults to the console's client id."""
    issuer = env.get("SLUICEGATE_OIDC_ISSUER") or None
    if issuer is None:
        return None
    scheme, _, rest = issuer.partition("://")
    host = rest.split("/", 1)[0].rsplit(":", 1)[0] if not rest.startswith("[") else rest.split("]")[0] + "]"
    if not rest or scheme not in ("https", "http") or (scheme == "http" and host not in _LOOPBACK_HOSTS):
        raise ConfigError("SLUICEGATE_OIDC_ISSUER: must be an https:// URL (http:// only on loopback)")
    clients = {env.get("SLUICEGATE_OIDC_CLIENT_ID") or "", env.get("SLUICEGATE_OIDC_CLI_CLIENT_ID") or ""}
    clients.discard("")
    audience = env.get("SLUICEGATE_OIDC_AUDIENCE") or env.get("SLUICEGATE_OIDC_CLIENT_ID") or None
    if audience is None:
        raise ConfigError(
            "SLUICEGATE_OIDC_AUDIENCE: required with SLUICEGATE_OIDC_ISSUER (the admin API's audience; "
            "defaults to SLUICEGATE_OIDC_CLIENT_ID)"
        )
    claims = {}
    for name, default in (("GROUPS_CLAIM", "groups"), ("SUBJECT_CLAIM", "sub")):
        value = env.get(f"SLUICEGATE_OIDC_{name}") or default
        if not _CLAIM_RE.fullmatch(value):
            raise ConfigError(f"SLUICEGATE_OIDC_{name}: not a claim name: {value!r}")
        claims[name] = value
    groups = frozenset(
        g.strip() for g in (env.get("SLUICEGATE_PLATFORM_ADMIN_GROUPS") or "").split(",") if g.strip()
    )
    return OidcSettings(
        issuer=issuer,
        audience=audience,
        groups_claim=claims["GROUPS_CLAIM"],
        subject_claim=claims["SUBJECT_CLAIM"],
        clients=frozenset(clients),
        platform_admin_groups=groups,
        jwks_min_refetch_s=_seconds(env, "SLUICEGATE_OIDC_JWKS_MIN_REFETCH", MIN_REFETCH_S),
    )


def _public_url(raw: str | None) -> str | None:
    """Where people reach the admin plane (the IdP sends them back under it): scheme and host."""
    if raw is None:
        return None
    scheme, _, rest = raw.partition("://")
    if scheme not in ("https", "http") or not rest or any(c in rest for c in "?#@ "):
        raise ConfigError(
            "SLUICEGATE_PUBLIC_URL: must be an http(s):// URL such as https://llm-admin.example.com, "
            f"got {raw!r}"
        )
    return raw.rstrip("/")


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected seconds, got {raw!r}") from None
    if not 0 <= value <= 3600:
        raise ConfigError(f"{name}: must be 0 to 3600 seconds, got {raw!r}")
    return value
