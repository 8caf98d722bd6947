"""The gateway's Redis client from SLUICEGATE_REDIS_URL: redis://, rediss:// (TLS), unix://,
redis+sentinel://[[user]:password@]host1:26379,host2:26379/<service>[/<db>][?sentinel_password=...]
or redis+cluster://[[user]:password@]host1:6379,host2:6379/ (rediss+cluster:// for TLS).

With Sentinel, every new connection asks the sentinels where the master is, so a failover costs
the calls in flight (they fail with a clean 503) and nothing more. The URL's password is the
master's; sentinels that have their own `requirepass` take `sentinel_password`.

With a cluster, the client learns the slot map from the seed nodes and follows MOVED/ASK; a
call that meets a dead node fails (one retry after re-reading the map), like a call to a dead
single Redis. Every multi-key call stays inside one hash slot (gateway/redis/keys.py).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, TypeAlias
from urllib.parse import urlsplit

from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError

from gateway.config import Settings
from gateway.redis.lean import LeanConnections
from gateway.redis.url import (
    CLUSTER_SCHEMES,
    SENTINEL_SCHEME,
    parse_cluster_url,
    parse_sentinel_url,
    validate_redis_url,
)
from gateway.seams.redis_pool import (
    close_cluster_nodes,
    lean_checkout,
    lean_release,
    pack_cluster_nodes,
    pack_with_hiredis,
)

# The one client type every module holding Redis takes: a single Redis (plain, TLS, unix or
# Sentinel's master) or a Redis Cluster. Both speak the same commands; what differs (pipelines
# split per node, no cross-slot scripts) is handled where keys are named (gateway/redis/keys.py).
RedisClient: TypeAlias = Redis | RedisCluster
RedisPipeline: TypeAlias = Pipeline | ClusterPipeline


class ClusterUnavailableError(RedisConnectionError):
    """redis-py raises some cluster failures outside RedisError's tree (no reachable node, a slot
    no node serves during a failover); the gateway's handlers catch RedisError, so the cluster
    client raises them as this instead: a clean 503 or fail-mode admission, never a 500. The
    message is the original's class name only (its text may quote a command's arguments)."""


log = logging.getLogger("sluicegate.redis")


def is_cluster(redis: RedisClient) -> bool:
    return isinstance(redis, RedisCluster)


async def learn_topology(redis: RedisClient, timeout_s: float) -> None:
    """A cluster client reads the slot map on its first call; the first burst of requests would
    each race to read it, and under load one of them could cut another's socket. Reading it once
    before the gateway serves avoids that. Unreachable now is not fatal: the first call reads it."""
    if not isinstance(redis, RedisCluster):
        return
    try:
        async with asyncio.timeout(timeout_s):
            await redis.initialize()
    except (RedisError, RedisClusterException, OSError, TimeoutError) as exc:
        log.warning("redis cluster topology not read at startup (%s): read on first use", type(exc).__name__)


async def close_redis(redis: RedisClient) -> None:
    """Closes every connection: the pool's (single node) or every node's (a cluster)."""
    if isinstance(redis, RedisCluster):
        await redis.aclose()
        await close_cluster_nodes(redis)
    else:
        await redis.aclose(close_connection_pool=True)


class _LeanPool(ConnectionPool):
    """Also keeps the script calls' connections (gateway/redis/lean.py), closed with the pool's."""

    get_connection = lean_checkout
    release = lean_release

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lean = LeanConnections(self.make_connection, self.max_connections)

    async def disconnect(self, inuse_connections: bool = True) -> None:
        self.lean.disconnect(inuse_connections)
        await super().disconnect(inuse_connections)


class _SentinelPool(SentinelConnectionPool):
    """Closing the gateway's client also closes the sentinel clients, which it alone uses."""

    get_connection = lean_checkout
    release = lean_release

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self.lean = LeanConnections(self.make_connection, self.max_connections, follows_master=True)

    async def disconnect(self, inuse_connections: bool = True) -> None:
        self.lean.disconnect(inuse_connections)
        await super().disconnect(inuse_connections)

    async def aclose(self) -> None:
        await super().aclose()
        await self.sentinel_manager.aclose()


def lean_connections(redis: RedisClient) -> LeanConnections | None:
    """The script calls' connections of a client `connect_redis` made for one Redis; None for a
    cluster (its calls are routed by slot) or a client built elsewhere."""
    pool = redis.connection_pool if isinstance(redis, Redis) else None
    return pool.lean if isinstance(pool, _LeanPool | _SentinelPool) else None


class _ClusterPipeline(ClusterPipeline):
    async def initialize(self) -> ClusterPipeline:  # `async with` learns the slot map here
        try:
            return await super().initialize()
        except RedisClusterException as exc:
            raise ClusterUnavailableError(type(exc).__name__) from exc

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> list[Any]:
        try:
            return await super().execute(raise_on_error, allow_redirections)
        except RedisClusterException as exc:
            raise ClusterUnavailableError(type(exc).__name__) from exc


class _Cluster(RedisCluster):
    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().execute_command(*args, **kwargs)
        except RedisClusterException as exc:
            raise ClusterUnavailableError(type(exc).__name__) from exc

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> ClusterPipeline:
        if shard_hint:
            return super().pipeline(transaction, shard_hint)  # refused by redis-py, as documented
        return _ClusterPipeline(self, transaction)  # type: ignore[abstract]  # as redis-py builds it


def _connect_cluster(url: str, settings: Settings, common: dict[str, Any]) -> RedisCluster:
    parsed = parse_cluster_url(url)
    client = _Cluster(
        startup_nodes=[ClusterNode(host, port) for host, port in parsed.hosts],
        username=parsed.username,
        password=parsed.password,
        ssl=parsed.tls,
        # Per node: a call past it fails at once (MaxConnectionsError, a clean 503).
        max_connections=common["max_connections"],
        socket_connect_timeout=common["socket_connect_timeout"],
        socket_timeout=None,
        # One retry after re-reading the slot map (a node gone, a failover), as the single
        # node's one retry on a fresh connection; never a backoff, the caller's timeout bounds it.
        retry=Retry(NoBackoff(), 1),
        # No load_balancing_strategy: every command goes to its slot's primary (replicas lag,
        # and limits must be exact).
    )
    pack_cluster_nodes(client)  # each node's connections pack with hiredis too
    return client


def plain_client(url: str) -> RedisClient:
    """A plain client for one short job outside the app (the demo's key): redis-py's defaults,
    no lean connections; closed with `close_redis`."""
    validate_redis_url(url)
    return Redis.from_url(url)


def connect_redis(settings: Settings) -> RedisClient:
    """A bounded pool (past `redis_max_connections` a call fails at once with a clear 503; on a
    cluster, the bound is per node).

    Per-socket read/write timeouts are off on purpose: redis-py arms up to three timers per
    command for them, a third of the gateway's CPU per request. Every call site bounds its
    whole call with one `asyncio.timeout(redis_timeout_s)` instead (see `redis_call`)."""
    url = settings.redis_url
    validate_redis_url(url)
    common: dict[str, Any] = {
        "max_connections": settings.redis_max_connections,
        "socket_connect_timeout": settings.redis_timeout_s,
        # Explicitly off: redis-py >= 8 defaults to 5 s, and its per-command timers cost more
        # than everything else the gateway does with Redis.
        "socket_timeout": None,
        # After Redis restarts, the pool still holds connections to the old process that look
        # open until used: one immediate retry on a fresh connection keeps each of them from
        # failing a request. Not on timeouts, whose command may well have run; a reply lost to a
        # closed connection is rare, and the scripts then err on the safe side (metering is
        # idempotent, a doubled admission charge only limits early).
        "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
    }
    scheme = urlsplit(url).scheme
    if scheme in CLUSTER_SCHEMES:
        return _connect_cluster(url, settings, common)
    if scheme != SENTINEL_SCHEME:
        return Redis(connection_pool=pack_with_hiredis(_LeanPool.from_url(url, **common)))
    parsed = parse_sentinel_url(url)
    # Sentinels are asked only when a connection opens, so their timers cost nothing per command.
    # A share of the budget each, and no retry (redis-py's default backs off for seconds), lets a
    # dead or hung sentinel fall through to the next one before the caller's own timeout fires.
    per_sentinel_s = settings.redis_timeout_s / (len(parsed.hosts) + 1)
    sentinel = Sentinel(  # type: ignore[no-untyped-call]  # untyped in redis-py
        list(parsed.hosts),
        sentinel_kwargs={
            "socket_connect_timeout": per_sentinel_s,
            "socket_timeout": per_sentinel_s,
            "retry": Retry(NoBackoff(), 0),
            "password": parsed.sentinel_password,
        },
    )
    client: Redis = sentinel.master_for(
        parsed.service,
        connection_pool_class=_SentinelPool,
        db=parsed.db,
        username=parsed.username,
        password=parsed.password,
        **common,
    )
    pack_with_hiredis(client.connection_pool)
    return client


__all__ = [
    "ClusterUnavailableError",
    "RedisClient",
    "RedisPipeline",
    "close_redis",
    "connect_redis",
    "is_cluster",
    "lean_connections",
]
