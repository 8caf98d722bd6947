"""The gateway on a real Redis Cluster whose topology changes under load: a primary SIGKILLed (its
replica promoted), a slot migrated with `redis-cli --cluster reshard`, the invalidation feed's
node killed; and teams spread over every primary, each team's keys on one.

Each test that changes the topology has a cluster of its own (`own_redis_cluster`). Nothing here
waits by time or asserts a duration: it waits for conditions (with a bound) and counts.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from gateway.redis import keys as redis_keys
from tests.conftest import FAKE_MODEL, Gateway, SessionLog, _gateway_factory
from tests.http import post
from tests.redis_cluster import RedisClusterNodes
from tests.waiting import wait_until

pytestmark = pytest.mark.cluster

BODY = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "hi"}]}
# Long enough that no request needs it, short enough that the suite stays quick: a request that
# meets the dead node costs at most this (then the breaker answers at once for as long).
REDIS_TIMEOUT_S = 0.5


def _tag_slot(team: str) -> int:
    return key_slot(redis_keys.team_tag(team)[1:-1].encode())


def _team_on(cluster: RedisClusterNodes, port: int, prefix: str = "topo") -> str:
    """A team name whose hash tag's slot the primary on `port` serves."""
    slots = cluster.slots_of(port)
    return next(f"{prefix}-{n}" for n in range(100_000) if _tag_slot(f"{prefix}-{n}") in slots)


class Load:
    """Threads sending chat completions with one key until stopped, counting what came back.
    A request that gets no answer within its timeout is a hang, counted as such."""

    def __init__(self, url: str, key: str, threads: int = 4) -> None:
        self._url, self._key = url, key
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.statuses: Counter[int | str] = Counter()
        self.tokens = 0
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                reply = post(f"{self._url}/v1/chat/completions", BODY, key=self._key, timeout=30)
            except OSError as exc:
                with self._lock:
                    self.statuses[type(exc).__name__] += 1
                continue
            with self._lock:
                self.statuses[reply.status] += 1
                if reply.status == 200:
                    self.tokens += int(reply.json()["usage"]["total_tokens"])

    @property
    def ok(self) -> int:
        with self._lock:
            return self.statuses[200]

    def wait_for_ok(self, count: int, what: str) -> None:
        wait_until(lambda: self.ok >= count, 60, what)

    @contextlib.contextmanager
    def running(self) -> Iterator[Load]:
        for thread in self._threads:
            thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            for thread in self._threads:
                thread.join(timeout=60)
            assert not any(t.is_alive() for t in self._threads), "a request never came back"


@pytest.fixture
def cluster_gateway(
    own_redis_cluster: RedisClusterNodes, fake_worker: str, session_log: SessionLog
) -> Callable[..., contextlib.AbstractContextManager[Gateway]]:
    return _gateway_factory(own_redis_cluster.url, fake_worker, session_log)


def _metered(gw: Gateway, team: str) -> tuple[int, int]:
    rows = gw.usage(team)
    return sum(int(r["requests"]) for r in rows), sum(int(r["total_tokens"]) for r in rows)


def _assert_stable_and_exact(gw: Gateway, team: str, load: Load) -> None:
    """Once the cluster is stable: usage metered equals what the worker's answers reported, and a
    fresh limit on the same team admits exactly its amount."""
    assert set(load.statuses) <= {200, 503}, load.statuses  # no 500, no hang, nothing else
    wait_until(lambda: _metered(gw, team) == (load.ok, load.tokens), 30, "usage metered as answered")
    tight = gw.new_key(team=team, rpm=10)["key"]
    statuses = Counter(post(f"{gw.url}/v1/chat/completions", BODY, key=tight).status for _ in range(15))
    assert statuses == {200: 10, 429: 5}


def test_teams_spread_over_all_three_primaries_and_each_team_stays_on_one(
    redis_cluster: RedisClusterNodes, fake_worker: str, session_log: SessionLog
) -> None:
    primaries = redis_cluster.primaries()
    assert len(primaries) == 3
    # Deterministic names: which primary each lands on is a fixed function of the name.
    teams = [f"spread-{n}" for n in range(30)]
    owners = {}
    for team in teams:
        slot = int(redis_cluster.cli("cluster", "keyslot", redis_keys.team_tag(team)).strip())
        assert slot == _tag_slot(team)
        owners[team] = redis_cluster.primary_of(redis_keys.team_tag(team))
    assert set(owners.values()) == set(primaries)

    # Every key the gateway writes for a team (limits, markers, usage, last-used) is on its primary.
    with _gateway_factory(redis_cluster.url, fake_worker, session_log)() as gw:
        team = gw.new_team()
        key = gw.new_key(team=team, rpm=100, tpm=100_000)
        assert post(f"{gw.url}/v1/chat/completions", BODY, key=key["key"]).status == 200
        wait_until(lambda: _metered(gw, team)[0] == 1, 10, "the request metered")
    owner = redis_cluster.primary_of(redis_keys.team_tag(team))
    found: dict[int, list[bytes]] = {}
    for port in primaries:
        with redis_cluster.node_client(port) as node:
            found[port] = list(node.scan_iter(match=f"*{redis_keys.team_tag(team)}*", count=1000))
    assert len(found[owner]) >= 3, found  # rate limits, usage, usage days at least
    assert all(not keys for port, keys in found.items() if port != owner), found


def test_a_primary_killed_under_load_costs_no_500_no_hang_and_no_usage(
    own_redis_cluster: RedisClusterNodes, cluster_gateway: Callable[..., Any]
) -> None:
    cluster = own_redis_cluster
    victim = cluster.primaries()[0]
    with cluster_gateway(redis_timeout_s=REDIS_TIMEOUT_S) as gw:
        team = _team_on(cluster, victim)
        gw.admin.call("POST", "/admin/v1/teams", {"name": team})
        key = gw.new_key(team=team, rpm=100_000)["key"]
        with Load(gw.url, key).running() as load:
            load.wait_for_ok(20, "requests served before the kill")
            # The key and team were written moments ago: a write the replica has not yet received
            # is lost with its primary (Redis replicates asynchronously), and the key with it.
            cluster.wait_replicated()
            cluster.kill(victim)
            wait_until(lambda: cluster.failed(victim), 30, "the victim marked failed")
            cluster.wait_ok()
            promoted = cluster.primary_of(redis_keys.team_tag(team))
            assert promoted != victim
            served = load.ok
            load.wait_for_ok(served + 40, "requests served by the promoted replica")
        _assert_stable_and_exact(gw, team, load)


def test_a_slot_resharded_under_load_costs_no_500_no_hang_and_no_usage(
    own_redis_cluster: RedisClusterNodes, cluster_gateway: Callable[..., Any]
) -> None:
    cluster = own_redis_cluster
    source, target = cluster.primaries()[:2]
    moved = 50
    # `reshard` takes the source's lowest slots first: a team whose slot is among them moves.
    lowest = min(cluster.slots_of(source))
    team = next(
        f"reshard-{n}" for n in range(100_000) if lowest <= _tag_slot(f"reshard-{n}") < lowest + moved
    )
    with cluster_gateway(redis_timeout_s=REDIS_TIMEOUT_S) as gw:
        gw.admin.call("POST", "/admin/v1/teams", {"name": team})
        key = gw.new_key(team=team, rpm=100_000)["key"]
        with Load(gw.url, key).running() as load:
            load.wait_for_ok(20, "requests served before the reshard")
            cluster.cli(
                "--cluster",
                "reshard",
                f"127.0.0.1:{source}",
                "--cluster-from",
                cluster.node_id(source),
                "--cluster-to",
                cluster.node_id(target),
                "--cluster-slots",
                str(moved),
                "--cluster-yes",
            )
            cluster.wait_ok()
            assert cluster.primary_of(redis_keys.team_tag(team)) == target
            served = load.ok
            load.wait_for_ok(served + 40, "requests served from the slot's new primary")
        _assert_stable_and_exact(gw, team, load)


def test_revocations_still_arrive_after_the_node_the_feed_listened_on_dies(
    own_redis_cluster: RedisClusterNodes, cluster_gateway: Callable[..., Any]
) -> None:
    """A 30 s key cache: only the invalidation feed can drop a revoked key within the wait."""
    cluster = own_redis_cluster
    with cluster_gateway(key_cache_ttl_s=30.0, redis_timeout_s=REDIS_TIMEOUT_S) as gw:

        def listening() -> list[int]:
            ports = []
            for port in cluster.ports:
                with contextlib.suppress(redis.RedisError), cluster.node_client(port) as node:
                    if node.pubsub_numsub(redis_keys.KEY_INVALIDATIONS)[0][1]:
                        ports.append(port)
            return ports

        wait_until(lambda: len(listening()) == 1, 10, "the feed subscribed on one node")
        [feed_node] = listening()
        cluster.kill(feed_node)
        wait_until(lambda: cluster.failed(feed_node), 30, "the node marked failed")
        cluster.wait_ok()
        wait_until(lambda: len(listening()) == 1, 30, "the feed subscribed again, elsewhere")
        key = gw.new_key(rpm=1000)
        assert post(f"{gw.url}/v1/chat/completions", BODY, key=key["key"]).status == 200  # cached
        gw.admin.call("DELETE", f"/admin/v1/keys/{key['id']}")
        wait_until(
            lambda: post(f"{gw.url}/v1/chat/completions", BODY, key=key["key"]).status == 401,
            10,
            "the revoked key refused, well before the cache's 30 s",
        )
