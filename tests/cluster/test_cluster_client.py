"""SLUICEGATE_REDIS_URL=redis+cluster://...: the URL checked at start, the cluster client built
from it (hiredis packing as on one node), and a cluster failure redis-py raises outside
RedisError's tree turned into a RedisError, which every handler in the gateway catches."""

from __future__ import annotations

import asyncio
import gc
import logging
import warnings

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection
from redis.exceptions import RedisClusterException, RedisError

from gateway.config import Settings
from gateway.errors import ConfigError
from gateway.redis.client import (
    ClusterUnavailableError,
    close_redis,
    connect_redis,
    is_cluster,
    learn_topology,
)
from gateway.redis.url import ClusterURL, parse_cluster_url, validate_redis_url
from tests.redis_cluster import RedisClusterNodes
from tests.servers import free_port

_A, _B = "10.0.0.1", "10.0.0.2"


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        (
            "redis+cluster://10.0.0.1:7000,10.0.0.2:7001/",
            ClusterURL((("10.0.0.1", 7000), ("10.0.0.2", 7001))),
        ),
        ("redis+cluster://r1", ClusterURL((("r1", 6379),))),
        ("rediss+cluster://u:p%40ss@r1:6380/0", ClusterURL((("r1", 6380),), True, "u", "p@ss")),
        (
            "redis+cluster://:only-password@r1:7000/",
            ClusterURL((("r1", 7000),), False, None, "only-password"),
        ),
    ],
)
def test_cluster_urls_name_seed_nodes_and_credentials(url: str, parsed: ClusterURL) -> None:
    validate_redis_url(url)
    assert parse_cluster_url(url) == parsed


@pytest.mark.parametrize(
    "url",
    [
        "redis+cluster://u:s3cret@r1:7000/1",  # a cluster has one database
        "redis+cluster://u:s3cret@r1:7000/?ssl_cert_reqs=none",  # options are not silently dropped
        "redis+cluster://u:s3cret@r1:99999/",
        "redis+cluster://u:s3cret@r1:7000,,r2/",
        "redis+clusters://u:s3cret@r1:7000/",
    ],
)
def test_a_bad_cluster_url_is_refused_without_quoting_its_password(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_redis_url(url)
    assert "s3cret" not in str(caught.value)


def test_a_cluster_nobody_answers_fails_as_a_redis_error_never_as_something_else() -> None:
    """redis-py raises RedisClusterException ("cannot be connected"), which is no RedisError: a
    handler catching RedisError would let it through as a 500."""
    dead = [free_port() for _ in range(2)]

    async def main() -> list[BaseException]:
        redis = connect_redis(
            Settings(
                redis_url=f"redis+cluster://127.0.0.1:{dead[0]},127.0.0.1:{dead[1]}/", redis_timeout_s=0.5
            )
        )
        assert is_cluster(redis)
        errors: list[BaseException] = []
        try:
            for call in (
                lambda: redis.get("sg:{t:a}:x"),
                lambda: redis.evalsha("0" * 40, 1, "sg:{t:a}:x"),
                lambda: _pipelined(redis),
            ):
                try:
                    await call()
                except BaseException as exc:  # the type is what is checked
                    errors.append(exc)
        finally:
            await close_redis(redis)
        return errors

    errors = asyncio.run(main())
    assert len(errors) == 3
    assert all(isinstance(error, RedisError) for error in errors), errors
    assert any(isinstance(error, ClusterUnavailableError) for error in errors), errors


async def _pipelined(redis: object) -> None:
    assert isinstance(redis, RedisCluster)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.incr("sg:{t:a}:x")
        pipe.incr("sg:{t:b}:x")
        await pipe.execute()


@pytest.mark.cluster
def test_cluster_connections_pack_commands_with_hiredis(redis_cluster: RedisClusterNodes) -> None:
    async def main() -> tuple[str, bytes, bytes]:
        redis = connect_redis(Settings(redis_url=redis_cluster.url))
        assert isinstance(redis, RedisCluster)
        try:
            await redis.ping()
            connections = {
                type(node.acquire_connection()).__name__ for node in redis.get_nodes()
            }  # one class for every node, seeds and discovered ones alike
            [name] = connections
            command = ("EVALSHA", "a" * 40, 1, "sg:{t:ml}:rl:x", "req-1", 60, 0.5, b"\x00")
            node = redis.get_node_from_key("sg:{t:ml}:rl:x")
            assert node is not None
            ours = b"".join(node.acquire_connection().pack_command(*command))
            return name, ours, b"".join(Connection().pack_command(*command))
        finally:
            await close_redis(redis)

    name, ours, expected = asyncio.run(main())
    assert name.startswith("Hiredis")
    assert ours == expected


@pytest.mark.cluster
def test_closing_after_a_node_died_leaves_no_socket_open(own_redis_cluster: RedisClusterNodes) -> None:
    """redis-py's own aclose() does nothing while its slot map is marked stale, as it is after a
    connection error: every node's sockets would stay open until the garbage collector found
    them (a ResourceWarning, an error under this suite's warning filter)."""
    cluster = own_redis_cluster
    victim = cluster.primaries()[0]
    on_victim = next(f"sg:{{t:{n}}}:x" for n in range(10_000) if cluster.primary_of(f"{{t:{n}}}") == victim)

    async def main() -> bool:
        redis = connect_redis(Settings(redis_url=cluster.url, redis_timeout_s=0.5))
        failed = False
        try:
            for n in range(30):  # connections to every primary
                await redis.set(f"sg:{{t:{n}}}:x", 1)
            cluster.kill(victim)
            try:
                await redis.get(on_victim)
            except RedisError:
                failed = True  # not the exception: its traceback would keep the client alive
        finally:
            await close_redis(redis)
        return failed

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        failed = asyncio.run(main())
        gc.collect()  # the client is garbage now: an unclosed socket of it warns here
    assert failed
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


@pytest.mark.cluster
def test_the_slot_map_is_read_before_the_first_call(redis_cluster: RedisClusterNodes) -> None:
    """The gateway's lifespan reads it once (learn_topology): a first burst of requests then finds
    it read instead of racing to read it, each on sockets the others may cut."""

    async def main() -> tuple[bool, bool]:
        redis = connect_redis(Settings(redis_url=redis_cluster.url))
        assert isinstance(redis, RedisCluster)
        try:
            before = _knows_slots(redis)
            await learn_topology(redis, timeout_s=10.0)
            return before, _knows_slots(redis)
        finally:
            await close_redis(redis)

    assert asyncio.run(main()) == (False, True)


def _knows_slots(redis: RedisCluster) -> bool:
    try:
        return redis.get_node_from_key("sg:{t:ml}:x") is not None
    except (RedisError, RedisClusterException):
        return False


def test_an_unreachable_cluster_at_startup_is_logged_and_read_on_first_use(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dead = free_port()

    async def main() -> None:
        redis = connect_redis(Settings(redis_url=f"redis+cluster://127.0.0.1:{dead}/", redis_timeout_s=0.5))
        try:
            await learn_topology(redis, timeout_s=0.5)
            with pytest.raises(RedisError):
                await redis.get("sg:{t:a}:x")  # still tried, and still a RedisError
        finally:
            await close_redis(redis)

    with caplog.at_level(logging.WARNING, "sluicegate.redis"):
        asyncio.run(main())
    assert any("topology not read at startup" in r.getMessage() for r in caplog.records)
