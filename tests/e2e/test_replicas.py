"""Three gateway processes sharing one Redis (and, marked `cluster`, one Redis Cluster): limits
stay exact across replicas, and a revocation reaches all of them."""

from __future__ import annotations

import concurrent.futures
import math
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.cli import AdminClient
from tests.conftest import FAKE_MODEL
from tests.http import get, post
from tests.redis_cluster import RedisServer
from tests.servers import free_port

pytestmark = pytest.mark.also_on_cluster

BODY = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "hi"}]}


@dataclass
class Replicas:
    urls: list[str]
    admin_token: str

    @property
    def admin(self) -> AdminClient:
        return AdminClient(self.urls[0], self.admin_token)

    def new_key(self, **limits: int) -> str:
        return str(self.new_key_record(**limits)["key"])

    def new_key_record(self, **limits: int) -> dict[str, Any]:
        team = "rep-" + secrets.token_hex(4)
        self.admin.call("POST", "/admin/v1/teams", {"name": team})
        key: dict[str, Any] = self.admin.call("POST", "/admin/v1/keys", {"team": team, **limits})
        return key


@pytest.fixture(scope="module")
def replicas(
    redis_server: RedisServer, fake_worker: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replicas]:
    config = tmp_path_factory.mktemp("replicas") / "models.yaml"
    config.write_text(f"models:\n  - name: {FAKE_MODEL}\n    endpoints:\n      - url: {fake_worker}\n")
    token = "adm-" + secrets.token_hex(16)
    processes: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    for _ in range(3):
        port = free_port()
        env = {
            **os.environ,
            "SLUICEGATE_REDIS_URL": redis_server.url,
            "SLUICEGATE_CONFIG": str(config),
            "SLUICEGATE_ADMIN_TOKEN": token,
            "SLUICEGATE_HOST": "127.0.0.1",
            "SLUICEGATE_PORT": str(port),
            "SLUICEGATE_LOG_LEVEL": "warning",
            # Only the invalidation feed can make a replica drop a revoked key this early.
            "SLUICEGATE_KEY_CACHE_TTL": "30",
            # No Service to leave: stop at once when the test is done.
            "SLUICEGATE_SHUTDOWN_DELAY": "0",
        }
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "gateway", "serve"], env=env, cwd=Path(__file__).parents[2]
            )
        )
        urls.append(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 30
        for url in urls:
            while True:
                try:
                    if get(f"{url}/healthz", timeout=1).status == 200:
                        break
                except OSError:
                    pass
                assert time.monotonic() < deadline, f"{url} did not start"
                time.sleep(0.05)
        yield Replicas(urls, token)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=15)


def test_rpm_60_admits_60_of_300_spread_over_three_replicas(replicas: Replicas) -> None:
    key = replicas.new_key(rpm=60)
    urls = replicas.urls
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=24) as pool:
        statuses = list(
            pool.map(lambda i: post(f"{urls[i % 3]}/v1/chat/completions", BODY, key=key).status, range(300))
        )
    elapsed = time.monotonic() - started
    # The burst is 60, and the limit earns one request back each second: however slow the
    # machine, the replicas together admit the burst plus what the elapsed time earned, no more.
    admitted = statuses.count(200)
    assert 60 <= admitted <= 60 + math.ceil(elapsed)
    assert statuses.count(429) == 300 - admitted


def test_concurrency_4_holds_across_replicas(replicas: Replicas) -> None:
    key = replicas.new_key(max_concurrency=4)
    urls = replicas.urls
    slow = {"x-fake-tokens": "4", "x-fake-token-delay-ms": "250"}
    with concurrent.futures.ThreadPoolExecutor(max_workers=15) as pool:
        statuses = list(
            pool.map(
                lambda i: post(f"{urls[i % 3]}/v1/chat/completions", BODY, key=key, headers=slow).status,
                range(15),
            )
        )
    assert statuses.count(200) == 4
    assert statuses.count(429) == 11


def test_tpm_holds_across_replicas_within_one_reservation(replicas: Replicas) -> None:
    key = replicas.new_key(tpm=300)
    urls = replicas.urls
    body = {**BODY, "max_tokens": 20}
    with concurrent.futures.ThreadPoolExecutor(max_workers=12) as pool:
        replies = list(
            pool.map(
                lambda i: post(
                    f"{urls[i % 3]}/v1/chat/completions", body, key=key, headers={"x-fake-tokens": "20"}
                ),
                range(60),
            )
        )
    served = [r.json()["usage"]["total_tokens"] for r in replies if r.status == 200]
    assert {r.status for r in replies} == {200, 429}
    # Never more than the limit plus one reservation (20 output tokens and a prompt estimate of
    # under 10). How far below it ends depends on how many refunds were still in flight when the
    # last requests were refused; test_team_limits checks the refunds themselves.
    assert 200 <= sum(served) <= 300 + 30


def test_revocation_on_one_replica_stops_the_key_on_the_others_before_their_caches_expire(
    replicas: Replicas,
) -> None:
    key = replicas.new_key_record()
    for url in replicas.urls:
        assert post(f"{url}/v1/chat/completions", BODY, key=key["key"]).status == 200  # cached everywhere
    replicas.admin.call("DELETE", f"/admin/v1/keys/{key['id']}")
    started = time.monotonic()
    for url in replicas.urls[1:]:
        while post(f"{url}/v1/chat/completions", BODY, key=key["key"]).status != 401:
            # The replicas cache keys for 30 s: only the invalidation feed stops it within 15.
            assert time.monotonic() - started < 15.0, f"{url} still accepts the revoked key"
            time.sleep(0.02)
