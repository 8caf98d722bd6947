"""SLUICEGATE_REDIS_URL=redis+sentinel://...: the URL's forms and errors, then a real sentinel
(`redis-sentinel`, or `redis-server --sentinel`) in front of a password-protected master with one
replica, through a forced failover."""

from __future__ import annotations

import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from openai.types.chat import ChatCompletionMessageParam

from gateway.cli import CliError
from gateway.config import Settings
from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.errors import ConfigError
from gateway.redis.url import SentinelURL, parse_sentinel_url
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory
from tests.http import get
from tests.servers import free_port

SERVICE = "mymaster"
HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello sentinel"}]


def test_sentinel_urls() -> None:
    assert parse_sentinel_url(
        "redis+sentinel://:p%40ss@s1:26379,s2,[::1]:5000/mymaster/3?sentinel_password=sp"
    ) == SentinelURL(
        hosts=(("s1", 26379), ("s2", 26379), ("::1", 5000)),
        service="mymaster",
        db=3,
        password="p@ss",
        sentinel_password="sp",
    )
    assert parse_sentinel_url("redis+sentinel://u:p@s1/svc").username == "u"
    assert Settings.from_env({"SLUICEGATE_REDIS_URL": "redis+sentinel://s1:26379/svc"}).redis_url


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://:hunter2@s1:26379",  # no service
        "redis+sentinel://:hunter2@s1:26379/",
        "redis+sentinel://:hunter2@s1:port/svc",
        "redis+sentinel://:hunter2@s1,,s2/svc",
        "redis+sentinel://:hunter2@/svc",
        "redis+sentinel://:hunter2@s1/svc/zero",
        "redis+sentinel://:hunter2@s1/svc/0/extra",
        "redis+sentinel://:hunter2@s1/svc?sentinel_pasword=x",
        "redis://:hunter2@r:99999/0",
        "http://:hunter2@r/0",
    ],
)
def test_malformed_redis_urls_name_the_setting_and_hide_the_password(url: str) -> None:
    with pytest.raises(ConfigError, match="SLUICEGATE_REDIS_URL") as caught:
        Settings.from_env({"SLUICEGATE_REDIS_URL": url})
    assert "hunter2" not in str(caught.value)


def _start(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait(check: object, what: str, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if callable(check) and check():
                return
        except redis.RedisError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def sentinel_setup(tmp_path: Path) -> Iterator[tuple[str, redis.Redis, str, int, int]]:
    """(gateway URL via the sentinel, a client of the sentinel, password, master and replica port)."""
    password = "pw-" + secrets.token_hex(6)
    processes: list[subprocess.Popen[bytes]] = []
    with EmbeddedRedis() as master:
        auth = ["--requirepass", password, "--masterauth", password]
        with redis.Redis(port=master.port) as admin:
            admin.config_set("requirepass", password)
        with redis.Redis(port=master.port, password=password) as admin:
            admin.config_set("masterauth", password)  # it becomes a replica after the failover
            admin.config_set("repl-diskless-sync-delay", 0)  # the default waits 5 s for more replicas
        replica_port = free_port()
        replica_dir = tmp_path / "replica"
        replica_dir.mkdir()
        replica = [
            *("redis-server", "--port", str(replica_port), "--bind", "127.0.0.1", "--save", ""),
            *("--dir", str(replica_dir), "--replicaof", "127.0.0.1", str(master.port), *auth),
        ]
        processes.append(_start(replica))
        with redis.Redis(port=replica_port, password=password) as r:
            _wait(lambda: r.info("replication")["master_link_status"] == "up", "the replica to sync")
        sentinel_port = free_port()
        conf = tmp_path / "sentinel.conf"  # sentinel rewrites it: it must be its own, writable
        conf.write_text(
            f"port {sentinel_port}\nbind 127.0.0.1\ndir {tmp_path}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {master.port} 1\n"
            f"sentinel auth-pass {SERVICE} {password}\n"
            f"sentinel down-after-milliseconds {SERVICE} 5000\n"
        )
        binary = shutil.which("redis-sentinel")
        processes.append(_start([binary, str(conf)] if binary else ["redis-server", str(conf), "--sentinel"]))
        sentinel = redis.Redis(port=sentinel_port, decode_responses=True)
        try:
            _wait(lambda: _replica_ready(sentinel), "the sentinel to see a promotable replica")
            url = (
                f"redis+sentinel://:{password}@127.0.0.1:{free_port()},127.0.0.1:{sentinel_port}/{SERVICE}/0"
            )
            yield url, sentinel, password, master.port, replica_port
        finally:
            sentinel.close()
            for process in processes:
                process.terminate()
                process.wait(timeout=10)


def _replica_ready(sentinel: redis.Redis) -> bool:
    return any(
        r["is_slave"] and not (r["is_disconnected"] or r["is_sdown"]) and r.get("master-link-status") == "ok"
        for r in sentinel.sentinel_slaves(SERVICE)
    )


def _failover(sentinel: redis.Redis) -> bool:
    """Sentinel may still refuse (NOGOODSLAVE) until it has pinged the replica itself."""
    try:
        return sentinel.sentinel_failover(SERVICE)
    except redis.ResponseError as exc:
        if "NOGOODSLAVE" not in str(exc):
            raise
        return False


def _master_port(sentinel: redis.Redis) -> int | None:
    address = sentinel.sentinel_get_master_addr_by_name(SERVICE)
    return address[1] if isinstance(address, tuple) else None


def _new_key_once_the_switch_is_seen(gw: Gateway, team: str) -> dict[str, Any]:
    """A call in flight at the switch may fail (a clean 503); new connections ask the sentinel
    again and find the new master."""
    deadline = time.monotonic() + 15
    while True:
        try:
            return gw.new_key(team=team)
        except CliError as exc:
            failure = str(exc)
        assert "HTTP 503" in failure, failure
        assert time.monotonic() < deadline, "the gateway never followed the failover"
        time.sleep(0.1)


def test_the_gateway_works_through_a_real_sentinel_and_follows_a_failover(
    make_gateway: GatewayFactory, sentinel_setup: tuple[str, redis.Redis, str, int, int]
) -> None:
    url, sentinel, password, master_port, replica_port = sentinel_setup
    # The first sentinel listed is down: the client falls through to the next one.
    with make_gateway(redis_url=url, redis_timeout_s=1.0) as gw:
        ready = get(f"{gw.url}/readyz")
        assert (ready.status, ready.json()["checks"]["redis"]) == (200, "ok"), ready.json()
        key = gw.new_key()
        client = gw.client(key["key"])
        assert client.chat.completions.create(model=FAKE_MODEL, messages=HELLO).usage is not None
        with redis.Redis(port=master_port, password=password) as master:
            assert master.dbsize() > 0, "the data is not on the master the sentinel named"

        _wait(lambda: _failover(sentinel), "the sentinel to start a failover")
        _wait(lambda: _master_port(sentinel) == replica_port, "the failover")
        after = _new_key_once_the_switch_is_seen(gw, key["team"])
        reply = gw.client(after["key"]).chat.completions.create(model=FAKE_MODEL, messages=HELLO)
        assert reply.usage is not None
        rows = {r["key_id"]: r["requests"] for r in gw.usage(key["team"])}
        assert rows == {key["id"]: 1, after["id"]: 1}
