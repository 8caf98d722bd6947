"""gateway/seams/redis_pool.py against the installed redis-py: every private and undocumented
name it relies on is there, on the objects it reaches them on."""

from __future__ import annotations

import asyncio
import inspect

from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster

from gateway.seams import redis_pool
from tests.seams.names import assert_present, missing


def test_a_pool_has_the_private_sets_its_lean_checkout_uses() -> None:
    pool = ConnectionPool.from_url("redis://127.0.0.1:1/0")  # nothing connects until a command
    assert_present("redis", pool, redis_pool.POOL_PRIVATES)
    # The checkout's release appends to one and discards from the other, as redis-py's own does.
    assert isinstance(pool._in_use_connections, set)
    assert isinstance(pool._available_connections, list)


def test_a_connection_has_the_stream_and_parser_the_lean_calls_take_over() -> None:
    pool = ConnectionPool.from_url("redis://127.0.0.1:1/0")
    connection = pool.make_connection()  # type: ignore[no-untyped-call]
    assert_present("redis", connection, redis_pool.CONNECTION_PRIVATES)
    assert_present("redis", connection._parser, ["parse_error"])
    assert isinstance(connection._parser.parse_error("NOSCRIPT No matching script"), Exception)


def test_the_undocumented_methods_it_calls_or_overrides_are_there() -> None:
    gone = [m for owner, name in redis_pool.UNDOCUMENTED for m in missing("redis", owner, [name])]
    assert not gone, "\n".join(gone)
    # The checkout and release replace these two, with the same call shapes.
    assert_present("redis", ConnectionPool, ["get_connection", "release"])
    assert list(inspect.signature(ConnectionPool.release).parameters) == ["self", "connection"]


def test_a_cluster_client_builds_nodes_from_the_kwargs_it_packs_with_hiredis() -> None:
    asyncio.run(_cluster_nodes())


async def _cluster_nodes() -> None:
    client = RedisCluster(host="127.0.0.1", port=1)  # reads the slot map only on first use
    try:
        manager = client.nodes_manager
        assert_present("redis", manager, ["connection_kwargs", "startup_nodes", "aclose"])
        assert "connection_class" in manager.connection_kwargs
        assert list(inspect.signature(manager.aclose).parameters) == ["attr"]
        redis_pool.pack_cluster_nodes(client)
        node = next(iter(manager.startup_nodes.values()))
        assert node.connection_class.__name__.startswith("Hiredis")
    finally:
        await redis_pool.close_cluster_nodes(client)


def test_a_hiredis_packed_command_is_redis_pys_own_bytes() -> None:
    """The packing override must write what redis-py's own connection writes."""
    asyncio.run(_packed())


async def _packed() -> None:
    plain = ConnectionPool.from_url("redis://127.0.0.1:1/0").make_connection()  # type: ignore[no-untyped-call]
    packed = redis_pool.pack_with_hiredis(ConnectionPool.from_url("redis://127.0.0.1:1/0"))
    ours = packed.make_connection()  # type: ignore[no-untyped-call]
    for command in (("SCRIPT LOAD", "return 1"), ("EVALSHA", "abc", 2, "k{a}", b"v", 1.5)):
        assert b"".join(ours.pack_command(*command)) == b"".join(plain.pack_command(*command))
    await Redis(connection_pool=packed).aclose()
