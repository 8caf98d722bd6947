"""redis-py's internals, used by the gateway's Redis client (gateway/redis/client.py) and its
script calls' lean connections (gateway/redis/lean.py). Pinned in pyproject.toml to the minor
version tests/seams/test_redis_pool.py checked.

What it relies on, and why:
- `ConnectionPool._in_use_connections` and `._available_connections`, and the undocumented
  `ConnectionPool.get_available_connection()`: the pool's checkout and release without redis-py 8's
  per-command extras (an asyncio.Lock, observability hooks, an event dispatch and a `can_read`
  probe of the socket), about a tenth of the gateway's CPU per request (`lean_checkout`).
- `AbstractConnection._writer`, `._reader` and `._parser` (its `parse_error`): the transport a
  connection redis-py opened (address, TLS, AUTH, database, Sentinel's master, its handshake) is
  taken over by a protocol that hands each reply to the waiting call itself, about half the
  instructions of redis-py's read path per script call (`take_transport`).
- `AbstractConnection.pack_command` overridden: hiredis builds a command's bytes in C
  (`with_hiredis_packing`).
- `RedisCluster.nodes_manager.connection_kwargs` (the one dict every node found later is built
  from), `nodes_manager.startup_nodes` and `nodes_manager.aclose(attr)`: the cluster's nodes pack
  with hiredis too, and every node's sockets close even while the slot map is marked stale
  (`pack_cluster_nodes`, `close_cluster_nodes`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import hiredis
from redis.asyncio import ConnectionPool
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection

# What tests/seams/test_redis_pool.py checks on the installed release: (owner, attribute).
POOL_PRIVATES = ("_in_use_connections", "_available_connections")
CONNECTION_PRIVATES = ("_writer", "_reader", "_parser")
UNDOCUMENTED = (
    (ConnectionPool, "get_available_connection"),
    (AbstractConnection, "pack_command"),
    (AbstractConnection, "should_reconnect"),
)


async def lean_checkout(
    self: ConnectionPool, command_name: Any = None, *keys: Any, **options: Any
) -> AbstractConnection:
    """A pool's `get_connection` without redis-py 8's per-command extras. Their probe guards
    against a connection given back with an unread reply; redis-py already drops a connection whose
    command was cancelled or failed half-way, and a connection Redis closed fails its next command,
    which the client's one retry sends again on a fresh socket."""
    connection: AbstractConnection = self.get_available_connection()  # type: ignore[no-untyped-call]
    try:
        await connection.connect()  # type: ignore[no-untyped-call]  # at once when connected
    except BaseException:
        await lean_release(self, connection)
        raise
    return connection


async def lean_release(self: ConnectionPool, connection: AbstractConnection) -> None:
    """A pool's `release`, the counterpart of `lean_checkout`."""
    self._in_use_connections.discard(connection)
    if connection.should_reconnect():  # type: ignore[no-untyped-call]
        await connection.disconnect()
    self._available_connections.append(connection)


def take_transport(
    connection: AbstractConnection,
) -> tuple[asyncio.StreamWriter | None, Callable[[str], Exception]]:
    """The stream writer of a connected redis-py connection, taken from it (the connection never
    uses it again), and the function that turns an error reply's text into redis-py's exception."""
    writer: asyncio.StreamWriter | None = connection._writer
    connection._reader = connection._writer = None
    parse_error: Callable[[str], Exception] = connection._parser.parse_error
    return writer, parse_error


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


def with_hiredis_packing(base: type[AbstractConnection]) -> type[AbstractConnection]:
    """`base`, its commands packed by hiredis."""
    return type(f"Hiredis{base.__name__}", (_HiredisPacking, base), {})


def pack_with_hiredis(pool: ConnectionPool) -> ConnectionPool:
    """The pool's connections, made from now on, pack with hiredis."""
    pool.connection_class = with_hiredis_packing(pool.connection_class)
    return pool


def pack_cluster_nodes(client: RedisCluster) -> None:
    """Each node's connections pack with hiredis: nodes found later are built from the nodes
    manager's kwargs (one dict, shared with it), the seed nodes already exist."""
    kwargs: dict[str, Any] = client.nodes_manager.connection_kwargs
    kwargs["connection_class"] = with_hiredis_packing(kwargs["connection_class"])
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = kwargs["connection_class"]


async def close_cluster_nodes(client: RedisCluster) -> None:
    """redis-py's aclose() does nothing while the slot map is marked to be read again (after a
    connection error, until the next call): the nodes' sockets would stay open."""
    await client.nodes_manager.aclose()
    await client.nodes_manager.aclose("startup_nodes")
