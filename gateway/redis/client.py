"""The gateway's Redis client from SLUICEGATE_REDIS_URL: redis://, rediss:// (TLS), unix:// or
redis+sentinel://[[user]:password@]host1:26379,host2:26379/<service>[/<db>][?sentinel_password=...].

With Sentinel, every new connection asks the sentinels where the master is, so a failover costs
the calls in flight (they fail with a clean 503) and nothing more. The URL's password is the
master's; sentinels that have their own `requirepass` take `sentinel_password`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import hiredis
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.config import Settings
from gateway.redis.url import SENTINEL_SCHEME, parse_sentinel_url, validate_redis_url


async def _lean_get_connection(
    self: ConnectionPool, command_name: Any = None, *keys: Any, **options: Any
) -> AbstractConnection:
    """Checkout without redis-py 8's per-command extras: an asyncio.Lock, three observability
    hooks, an event dispatch and a `can_read` probe of the socket on every command, about a tenth
    of the gateway's CPU per request. The probe guards against a connection given back with an
    unread reply; redis-py already drops a connection whose command was cancelled or failed
    half-way, and a connection Redis closed fails its next command, which the client's one retry
    sends again on a fresh socket."""
    connection: AbstractConnection = self.get_available_connection()  # type: ignore[no-untyped-call]
    try:
        await connection.connect()  # type: ignore[no-untyped-call]  # at once when connected
    except BaseException:
        await _lean_release(self, connection)
        raise
    return connection


async def _lean_release(self: ConnectionPool, connection: AbstractConnection) -> None:
    self._in_use_connections.discard(connection)
    if connection.should_reconnect():  # type: ignore[no-untyped-call]
        await connection.disconnect()
    self._available_connections.append(connection)


class _LeanPool(ConnectionPool):
    get_connection = _lean_get_connection
    release = _lean_release


class _SentinelPool(SentinelConnectionPool):
    """Closing the gateway's client also closes the sentinel clients, which it alone uses."""

    get_connection = _lean_get_connection
    release = _lean_release

    async def aclose(self) -> None:
        await super().aclose()
        await self.sentinel_manager.aclose()


class _HiredisPacking:
    """redis-py's asyncio connections build each command's bytes in Python: about 24 µs for an
    admission with every limit on key and team, a twentieth of the gateway's whole CPU budget per
    request. hiredis (already the reply parser) builds the same bytes in C in about 4 µs."""

    def pack_command(self, *args: Any) -> list[bytes]:
        # Like redis-py: a command name such as "SCRIPT LOAD" goes out as two arguments.
        first = args[0]
        if isinstance(first, str):
            first = first.encode()
        if b" " in first:
            args = (*first.split(), *args[1:])
        return [hiredis.pack_command(args)]


def _pack_with_hiredis(pool: ConnectionPool) -> ConnectionPool:
    base: type[AbstractConnection] = pool.connection_class
    pool.connection_class = type(f"Hiredis{base.__name__}", (_HiredisPacking, base), {})
    return pool


def connect_redis(settings: Settings) -> Redis:
    """A bounded pool (past `redis_max_connections` a call fails at once with a clear 503).

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
    if urlsplit(url).scheme != SENTINEL_SCHEME:
        return Redis(connection_pool=_pack_with_hiredis(_LeanPool.from_url(url, **common)))
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
    _pack_with_hiredis(client.connection_pool)
    return client


__all__ = ["connect_redis"]
