"""Shared fixtures: one real redis-server per session, a real fake worker, real gateways.

Every gateway a test builds is a real uvicorn server on a loopback socket in front of the fake
worker, with its own Prometheus registry; data in Redis is per-test (fresh team names).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
import redis

from gateway.apis import APIS, ClientApi
from gateway.app import create_app
from gateway.cli import AdminClient
from gateway.config import Settings
from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.model_table import ModelConfig, ModelTable, Timeouts

# The cluster fixtures, registered here for every test (tests/redis_cluster.py).
from tests.redis_cluster import RedisServer, own_redis_cluster, redis_cluster, sync_client  # noqa: F401
from tests.servers import listening_socket, run_uvicorn
from workers.fake.app import create_app as create_fake_worker

FAKE_MODEL = "fake-model"
OTHER_MODEL = "other-model"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A module marked `also_on_cluster` runs each of its tests that uses Redis twice: on one
    Redis and on the session's Redis Cluster (that one marked `cluster`)."""
    if metafunc.definition.get_closest_marker("also_on_cluster") and "redis_server" in metafunc.fixturenames:
        metafunc.parametrize(
            "redis_server",
            ["single", pytest.param("cluster", marks=pytest.mark.cluster)],
            indirect=True,
            scope="session",
        )


@pytest.fixture(scope="session")
def redis_server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    if getattr(request, "param", "single") == "cluster":
        yield request.getfixturevalue("redis_cluster")
        return
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis | redis.RedisCluster]:
    client = sync_client(redis_server.url)
    yield client
    client.close()


@pytest.fixture(scope="session")
def fake_worker() -> Iterator[str]:
    with run_uvicorn(create_fake_worker([FAKE_MODEL, OTHER_MODEL, "upstream/real-name"])) as url:
        yield url


def worker_record(worker_url: str, request_id: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{worker_url}/fake/requests/{request_id}", timeout=5) as resp:  # noqa: S310
            import json

            record: dict[str, Any] = json.loads(resp.read())
            return record
    except urllib.error.HTTPError as exc:
        with exc:
            if exc.code == 404:
                return None
            raise


@dataclass
class Gateway:
    url: str
    admin_token: str
    settings: Settings
    secrets_created: list[str] = field(default_factory=list)
    clients: list[openai.OpenAI] = field(default_factory=list)

    @property
    def admin(self) -> AdminClient:
        return AdminClient(self.url, self.admin_token)

    def new_team(self) -> str:
        name = "team-" + secrets.token_hex(4)
        self.admin.call("POST", "/admin/v1/teams", {"name": name})
        return name

    def new_key(self, team: str | None = None, **fields: Any) -> dict[str, Any]:
        team = team or self.new_team()
        key: dict[str, Any] = self.admin.call("POST", "/admin/v1/keys", {"team": team, **fields})
        self.secrets_created.append(key["key"])
        return key

    def client(self, key: str, **kwargs: Any) -> openai.OpenAI:
        client = openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, **kwargs)
        self.clients.append(client)  # closed with the gateway: open pools would leak sockets
        return client

    def close(self) -> None:
        for client in self.clients:
            client.close()

    def usage(self, team: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.admin.call("GET", "/admin/v1/usage", team=team)["data"]
        return rows


GatewayFactory = Callable[..., contextlib.AbstractContextManager[Gateway]]


def default_table(worker_url: str, **timeouts: float) -> ModelTable:
    t = Timeouts(**timeouts)
    return ModelTable(
        (
            ModelConfig(name=FAKE_MODEL, aliases=("default",), endpoints=(worker_url,), timeouts=t),
            ModelConfig(name=OTHER_MODEL, endpoints=(worker_url,), timeouts=t),
            ModelConfig(
                name="renamed", upstream_model="upstream/real-name", endpoints=(worker_url,), timeouts=t
            ),
        )
    )


class SessionLog(logging.Handler):
    """Collects formatted log records; for the whole session, it also holds every secret a test
    created (keys, admin tokens), none of which may appear in any record."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []
        self.secrets: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@contextlib.contextmanager
def _capturing_logs() -> Iterator[SessionLog]:
    handler = SessionLog()
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


@pytest.fixture(scope="session", autouse=True)
def session_log() -> Iterator[SessionLog]:
    with _capturing_logs() as handler:
        yield handler
    text = "\n".join(handler.lines)
    if handler.secrets:
        assert "sluicegate.access" in text, "the session's logs were not captured"
    leaked = [secret[:10] + "..." for secret in handler.secrets if secret in text]
    assert not leaked, f"secrets found in log lines: {leaked}"


def _gateway_factory(redis_url: str, worker_url: str, session_log: SessionLog) -> GatewayFactory:
    @contextlib.contextmanager
    def factory(
        table: ModelTable | None = None, *, apis: tuple[ClientApi, ...] = APIS, **overrides: Any
    ) -> Iterator[Gateway]:
        """`apis`: the client APIs the app serves (one more is one more entry: tests/apis/toy_api)."""
        admin_token = "adm-" + secrets.token_urlsafe(32)
        sock = listening_socket()
        fields: dict[str, Any] = {
            "redis_url": redis_url,
            "admin_token": admin_token,
            "host": "127.0.0.1",
            "port": sock.getsockname()[1],
            # Each gateway its own spool: one stopped with Redis down must not replay into another.
            "spool_path": os.path.join(
                tempfile.gettempdir(), f"sluicegate-test-{secrets.token_hex(6)}.spool"
            ),
        }
        settings = Settings(**{**fields, **overrides})
        app = create_app(settings, table or default_table(worker_url), apis=apis)
        with run_uvicorn(app, sock=sock, settings=settings) as url:
            gw = Gateway(
                url=url, admin_token=admin_token, settings=settings, secrets_created=session_log.secrets
            )
            session_log.secrets.append(admin_token)
            try:
                yield gw
            finally:
                gw.close()

    return factory


@pytest.fixture
def make_gateway(redis_server: RedisServer, fake_worker: str, session_log: SessionLog) -> GatewayFactory:
    """Builds real gateways (default: in front of the fake worker) that live within one test."""
    return _gateway_factory(redis_server.url, fake_worker, session_log)


@pytest.fixture(scope="module")
def make_gateway_module(
    redis_server: RedisServer, fake_worker: str, session_log: SessionLog
) -> GatewayFactory:
    """The same, for gateways shared by a module's tests (in front of a slow-to-start worker)."""
    return _gateway_factory(redis_server.url, fake_worker, session_log)


@pytest.fixture
def gateway(make_gateway: GatewayFactory) -> Iterator[Gateway]:
    with make_gateway() as gw:
        yield gw


@pytest.fixture
def all_logs() -> Iterator[list[str]]:
    """Every log record of every logger, at every level, formatted, while the test runs."""
    with _capturing_logs() as handler:
        yield handler.lines
