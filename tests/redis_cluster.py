"""A real Redis Cluster on loopback for the tests: 3 primaries + 3 replicas, each its own
`redis-server --cluster-enabled yes` in its own directory, joined with `redis-cli --cluster create`.

Registered by tests/conftest.py (imported there). The session's cluster (`redis_cluster`) is shared
and must stay whole: a test that kills or reshards nodes takes its own (`own_redis_cluster`).
Suites that exercise Redis itself opt in to run on both (`pytestmark = pytest.mark.also_on_cluster`,
see tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio
from redis.crc import key_slot

from gateway.config import Settings
from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.redis.client import RedisClient, close_redis, connect_redis
from gateway.redis.url import CLUSTER_SCHEMES, parse_cluster_url
from tests.waiting import wait_until

_BUS_OFFSET = 10_000  # each node also listens on its port + 10000, the cluster bus
_MAX_PORT = 45_000
_NODE_TIMEOUT_MS = 2000  # how long until a silent primary is failed over


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def cluster_ports(count: int) -> list[int]:
    """Ports at or below 45000 whose bus port (+10000) is free too; random, so concurrent test
    sessions rarely pick the same ones (a race lost shows as a node that fails to start)."""
    ports: list[int] = []
    rng = random.SystemRandom()
    while len(ports) < count:
        port = rng.randint(20_000, _MAX_PORT)
        if port not in ports and _bindable(port) and _bindable(port + _BUS_OFFSET):
            ports.append(port)
    return ports


class RedisClusterNodes:
    """Six redis-server processes forming one cluster. `.url` is the gateway's
    SLUICEGATE_REDIS_URL for it; ports are the nodes' (client ports)."""

    def __init__(self, *, primaries: int = 3, replicas_each: int = 1) -> None:
        self._count = primaries * (1 + replicas_each)
        self._replicas_each = replicas_each
        self.ports = cluster_ports(self._count)
        self._dir = tempfile.mkdtemp(prefix="sluicegate-cluster-")
        self._processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        seeds = ",".join(f"127.0.0.1:{port}" for port in self.ports[:3])
        return f"redis+cluster://{seeds}/"

    def start(self) -> RedisClusterNodes:
        self._launch()
        self.cli(
            "--cluster",
            "create",
            *(f"127.0.0.1:{port}" for port in self.ports),
            "--cluster-replicas",
            str(self._replicas_each),
            "--cluster-yes",
        )
        replicas = self._count - self._count // (1 + self._replicas_each)
        wait_until(
            lambda: sum(node["role"] == "replica" for node in self.nodes()) == replicas,
            30,
            "every replica known as one",
        )
        self.wait_ok()
        return self

    def _launch(self) -> None:
        """Every node answering; a port taken meanwhile by someone else (the node exits at once)
        is replaced by another free one."""
        for _ in range(3):
            for port in self.ports:
                if port not in self._processes:
                    self._start_node(port)
            wait_until(
                lambda: all(self._pings(p) or self._processes[p].poll() is not None for p in self.ports),
                10,
                "every redis-server answers or exits",
            )
            lost = [p for p in self.ports if self._processes[p].poll() is not None]
            if not lost:
                return
            for port in lost:
                del self._processes[port]
                fresh = cluster_ports(1)[0]
                while fresh in self.ports:
                    fresh = cluster_ports(1)[0]
                self.ports[self.ports.index(port)] = fresh
        raise AssertionError("redis-server nodes kept failing to start")

    def _start_node(self, port: int) -> None:
        node_dir = f"{self._dir}/{port}"
        os.makedirs(node_dir, exist_ok=True)
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not on PATH"
        self._processes[port] = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                str(_NODE_TIMEOUT_MS),
                "--save",
                "",
                "--appendonly",
                "no",
                # A replica that never finished its first sync cannot be promoted: start it at once
                # (the default waits 5 s for more replicas to share one transfer).
                "--repl-diskless-sync-delay",
                "0",
                "--dir",
                node_dir,
                "--logfile",
                "redis.log",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def _pings(self, port: int) -> bool:
        try:
            with redis.Redis(port=port, socket_timeout=1) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def cli(self, *args: str, port: int | None = None) -> str:
        command = ["redis-cli"]
        if port is not None or args[0] != "--cluster":
            command += ["-p", str(port or self.ports[0])]
        done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=120, check=True)
        return done.stdout

    def node_client(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_timeout=5)

    def nodes(self) -> list[dict[str, Any]]:
        """CLUSTER NODES as seen by a live node: id, port, role, and the node's slot ranges."""
        for port in self.ports:
            if port in self._processes and self._pings(port):
                lines = self.cli("cluster", "nodes", port=port).splitlines()
                break
        else:
            raise AssertionError("no cluster node answers")
        out = []
        for line in lines:
            fields = line.split()
            flags = fields[2].split(",")
            out.append(
                {
                    "id": fields[0],
                    "port": int(fields[1].split("@")[0].rsplit(":", 1)[1]),
                    "role": "primary" if "master" in flags else "replica",
                    "failed": "fail" in flags,
                    "slots": fields[8:],
                }
            )
        return out

    def primaries(self) -> list[int]:
        return sorted(n["port"] for n in self.nodes() if n["role"] == "primary" and not n["failed"])

    def node_id(self, port: int) -> str:
        return str(next(n["id"] for n in self.nodes() if n["port"] == port))

    def slots_of(self, port: int) -> set[int]:
        """The slots the node on `port` serves now (none for a replica or a failed node)."""
        slots: set[int] = set()
        for node in self.nodes():
            if node["port"] != port or node["role"] != "primary" or node["failed"]:
                continue
            for span in node["slots"]:
                if span.startswith("["):
                    continue  # a slot being migrated, listed on its source too
                low, _, high = span.partition("-")
                slots.update(range(int(low), int(high or low) + 1))
        return slots

    def primary_of(self, key: str) -> int:
        """The port of the primary serving `key`'s slot now."""
        slot = key_slot(key.encode())
        for port in self.primaries():
            if slot in self.slots_of(port):
                return port
        raise AssertionError(f"no primary serves slot {slot}")

    def failed(self, port: int) -> bool:
        """The live nodes agree the node on `port` has failed (FAIL, not just suspected)."""
        return any(node["port"] == port and node["failed"] for node in self.nodes())

    def _state_ok(self) -> bool:
        live = [p for p in self.ports if p in self._processes]
        try:
            infos = [self.cli("cluster", "info", port=p) for p in live]
        except subprocess.CalledProcessError:
            return False
        return all("cluster_state:ok" in info for info in infos)

    def _live_replicas(self) -> list[int]:
        return [
            node["port"]
            for node in self.nodes()
            if node["role"] == "replica" and not node["failed"] and node["port"] in self._processes
        ]

    def _replicas_synced(self) -> bool:
        return all(
            self._replication(port).get("master_link_status") == "up" for port in self._live_replicas()
        )

    def _replication(self, port: int) -> dict[str, str]:
        lines = self.cli("info", "replication", port=port).splitlines()
        return dict(line.split(":", 1) for line in lines if ":" in line)

    def wait_replicated(self, within_s: float = 30) -> None:
        """Every live replica has every write its primary had taken when this was called. Redis
        replicates asynchronously, and a replica fresh from its first sync gets the writes made
        since only after its first acknowledgement, up to a second later: a primary killed before
        that takes those writes with it (a key created just before, say)."""
        targets: dict[int, int] = {}
        for port in self._live_replicas():
            primary = int(self._replication(port)["master_port"])
            if primary in self._processes:
                targets[port] = int(self._replication(primary)["master_repl_offset"])

        def caught_up() -> bool:
            return all(
                int(self._replication(port).get("slave_repl_offset", -1)) >= target
                for port, target in targets.items()
            )

        wait_until(caught_up, within_s, "every live replica has its primary's writes")

    def wait_ok(self, within_s: float = 30) -> None:
        """Every live node says cluster_state:ok and every live replica is in sync with its
        primary (after create, a failover or a restart): only a synced replica can be promoted."""
        wait_until(self._state_ok, within_s, "cluster_state:ok on every live node")
        wait_until(self._replicas_synced, within_s, "every live replica synced with its primary")
        self.wait_replicated(within_s)

    def kill(self, port: int) -> None:
        """SIGKILL: no goodbye to the cluster, as a crashed host."""
        process = self._processes.pop(port)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)

    def restart(self, port: int) -> None:
        """The node comes back from its nodes.conf (as a replica, if it was failed over)."""
        self._start_node(port)
        wait_until(lambda: self._pings(port), 10, f"redis-server on {port} answers again")

    def stop(self) -> None:
        for process in self._processes.values():
            process.send_signal(signal.SIGKILL)
        for process in self._processes.values():
            process.wait(timeout=10)
        self._processes.clear()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> RedisClusterNodes:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


# What `redis_server` is: one Redis, or (in an `also_on_cluster` module's [cluster] runs) the cluster.
RedisServer = EmbeddedRedis | RedisClusterNodes


def _is_cluster_url(url: str) -> bool:
    return url.partition("://")[0] in CLUSTER_SCHEMES


def async_client(url: str) -> RedisClient:
    """A client for either kind of URL: redis-py's own for one Redis (as the suites always used),
    the gateway's for a cluster (what the code under test gets in production)."""
    if not _is_cluster_url(url):
        return redis.asyncio.Redis.from_url(url)
    return connect_redis(Settings(redis_url=url))


T = TypeVar("T")


def run_with_client(url: str, scenario: Callable[[RedisClient], Awaitable[T]]) -> T:
    """Runs `scenario` on a fresh event loop with a client of `url`, closed after it whatever happens."""

    async def main() -> T:
        client = async_client(url)
        try:
            return await scenario(client)
        finally:
            await close_redis(client)

    return asyncio.run(main())


def sync_client(url: str) -> redis.Redis | redis.RedisCluster:
    if not _is_cluster_url(url):
        return redis.Redis.from_url(url)
    host, port = parse_cluster_url(url).hosts[0]
    return redis.RedisCluster(host=host, port=port)


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterNodes]:
    with RedisClusterNodes() as cluster:
        yield cluster


@pytest.fixture
def own_redis_cluster() -> Iterator[RedisClusterNodes]:
    """A cluster of the test's own, for tests that kill nodes or move slots."""
    with RedisClusterNodes() as cluster:
        yield cluster
