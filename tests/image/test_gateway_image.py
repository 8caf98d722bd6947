"""The gateway image as Kubernetes runs it: `sluicegate serve` (the image's default command) as a
non-root user on a read-only root filesystem, here on the host network in front of the test's
Redis, the fake worker and the Reframr image's container. It serves its probes and metrics, relays
chat whole and streamed to both workers, and stops on SIGTERM as `serve` does (tests/faults/test_drain.py,
here through podman's signal and exit status)."""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import openai
import pytest

from gateway.cli import AdminClient
from gateway.dev.embedded_redis import EmbeddedRedis
from tests.adversarial.scripted import MODEL as HELD_MODEL
from tests.adversarial.scripted import held_stream, run_scripted
from tests.conftest import FAKE_MODEL, SessionLog
from tests.http import get
from tests.image.podman import Container, start
from tests.servers import free_port
from tests.workers.test_conformance import MODEL as REFRAMR_UPSTREAM

pytestmark = pytest.mark.timeout(300)
REFRAMR_MODEL = "reframr"
WAIT_S = 60.0
FOREVER = "600"  # a delay or drain that never runs out during a test: a second signal ends it
TABLE = "/etc/sluicegate/models.yaml"


class Gateway:
    def __init__(self, container: Container, token: str, secrets_log: list[str]) -> None:
        self.container = container
        self.url = container.url
        self.admin = AdminClient(self.url, token)
        self._secrets = secrets_log

    def client(self) -> openai.OpenAI:
        team = "image-" + secrets.token_hex(4)
        self.admin.call("POST", "/admin/v1/teams", {"name": team})
        key: str = self.admin.call("POST", "/admin/v1/keys", {"team": team})["key"]
        self._secrets.append(key)
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, timeout=WAIT_S)

    def metric(self, name: str, **labels: str) -> float:
        wanted = [f'{k}="{v}"' for k, v in labels.items()]
        total = 0.0
        for line in get(f"{self.url}/metrics").body.decode().splitlines():
            if line.startswith(name + "{") and all(label in line for label in wanted):
                total += float(line.rsplit(" ", 1)[1])
        return total


StartGateway = Callable[..., Gateway]


@contextlib.contextmanager
def _gateways(
    image: str, redis_url: str, tmp_path: Path, session_log: SessionLog
) -> Iterator[Callable[..., Gateway]]:
    started: list[Container] = []

    def start_gateway(models: dict[str, str], **settings: str) -> Gateway:
        """`models`: model name -> worker URL (Reframr's served under REFRAMR_UPSTREAM)."""
        rows = [
            {"name": name, "endpoints": [{"url": url}]}
            | ({"upstream_model": REFRAMR_UPSTREAM} if name == REFRAMR_MODEL else {})
            for name, url in models.items()
        ]
        table = tmp_path / f"models-{len(started)}.yaml"
        table.write_text(json.dumps({"models": rows}))  # JSON is YAML
        port, token = free_port(), "adm-image-" + secrets.token_hex(24)
        session_log.secrets.append(token)
        env = {
            "SLUICEGATE_CONFIG": TABLE,
            "SLUICEGATE_REDIS_URL": redis_url,
            "SLUICEGATE_HOST": "127.0.0.1",
            "SLUICEGATE_PORT": str(port),
            "SLUICEGATE_ADMIN_TOKEN": token,
            **settings,
        }
        options = ["--volume", f"{table}:{TABLE}:ro"]
        for name, value in env.items():
            options += ["--env", f"{name}={value}"]
        container = start(image, port=port, options=tuple(options))
        started.append(container)
        return Gateway(container, token, session_log.secrets)

    try:
        yield start_gateway
    finally:
        for container in started:
            session_log.lines.extend(container.logs().splitlines())
            container.remove()


@pytest.fixture(scope="module")
def gateway(
    images: dict[str, str],
    redis_server: EmbeddedRedis,
    fake_worker: str,
    reframr: Container,
    tmp_path_factory: pytest.TempPathFactory,
    session_log: SessionLog,
) -> Iterator[Gateway]:
    """One gateway container, in front of the fake worker and the Reframr container."""
    folder = tmp_path_factory.mktemp("gateway-image")
    with _gateways(images["gateway"], redis_server.url, folder, session_log) as start_gateway:
        yield start_gateway({FAKE_MODEL: fake_worker, REFRAMR_MODEL: reframr.url})


@pytest.fixture
def start_gateway(
    images: dict[str, str], redis_server: EmbeddedRedis, tmp_path: Path, session_log: SessionLog
) -> Iterator[StartGateway]:
    """Gateway containers of the test's own (the ones it stops)."""
    with _gateways(images["gateway"], redis_server.url, tmp_path, session_log) as start_gateway:
        yield start_gateway


def test_serves_its_probes_and_metrics(gateway: Gateway) -> None:
    health = get(f"{gateway.url}/healthz")
    assert (health.status, health.json()) == (200, {"status": "ok"})
    ready = get(f"{gateway.url}/readyz")
    assert ready.status == 200, ready.body
    assert ready.json()["checks"]["redis"] == "ok"
    metrics = get(f"{gateway.url}/metrics")
    assert metrics.status == 200
    assert "# TYPE sluicegate_requests_total counter" in metrics.body.decode()


def test_runs_as_a_non_root_user_on_a_read_only_root(gateway: Gateway) -> None:
    uid = gateway.container.exec("id", "-u")
    assert uid.stdout.strip() == "10001", uid.stdout + uid.stderr
    write = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('x')"
    denied = gateway.container.exec("python", "-c", write, "/opt/sluicegate/probe")
    assert denied.returncode != 0
    assert "Read-only file system" in denied.stderr, denied.stderr
    # The only places it may write: /tmp and its spool's volume.
    for path in ("/tmp/probe", "/var/lib/sluicegate/probe"):
        done = gateway.container.exec("python", "-c", write, path)
        assert done.returncode == 0, f"{path}: {done.stderr}"


# What each worker answers to the prompt below with max_tokens=6: proof of who answered.
ANSWERS = {
    REFRAMR_MODEL: "mode=default hello from a container w5",  # the prompt's words, then filler
    FAKE_MODEL: "tok0 tok1 tok2 tok3 tok4 tok5 ",
}


@pytest.mark.parametrize("model", [REFRAMR_MODEL, FAKE_MODEL])
def test_relays_chat_whole_and_streamed(gateway: Gateway, model: str) -> None:
    before = gateway.metric("sluicegate_requests_total", model=model, api="chat", code="200")
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [
        {"role": "user", "content": "hello from a container"}
    ]
    with gateway.client() as client:
        whole = client.chat.completions.create(model=model, messages=messages, max_tokens=6)
        stream = client.chat.completions.create(
            model=model, messages=messages, max_tokens=6, stream=True, stream_options={"include_usage": True}
        )
        chunks = list(stream)
    assert whole.choices[0].message.content == ANSWERS[model]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ANSWERS[model]
    assert whole.usage is not None
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens == 6
    after = gateway.metric("sluicegate_requests_total", model=model, api="chat", code="200")
    assert after - before == 2


def _ready(gateway: Gateway) -> int:
    return get(f"{gateway.url}/readyz", timeout=10).status


def _wait(check: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _exits_cleanly(gateway: Gateway) -> None:
    assert gateway.container.wait() == 0, gateway.container.logs()
    logs = gateway.container.logs()
    assert "Application shutdown complete" in logs, logs
    assert "Traceback" not in logs, logs


def test_sigterm_fails_readyz_at_once_and_requests_are_still_served(
    start_gateway: StartGateway, fake_worker: str
) -> None:
    gateway = start_gateway({FAKE_MODEL: fake_worker}, SLUICEGATE_SHUTDOWN_DELAY=FOREVER)
    with gateway.client() as client:
        assert _ready(gateway) == 200
        gateway.container.signal("TERM")
        _wait(lambda: _ready(gateway) == 503, "/readyz never failed after SIGTERM")
        # Still serving, as Kubernetes may route to the pod until its endpoints update.
        reply = client.chat.completions.create(model=FAKE_MODEL, messages=[{"role": "user", "content": "x"}])
        assert reply.choices[0].message.content
    assert gateway.container.running()
    gateway.container.signal("TERM")  # a second signal cuts the delay short
    _exits_cleanly(gateway)


def test_a_stream_open_at_sigterm_completes_before_the_container_exits(start_gateway: StartGateway) -> None:
    released = threading.Event()
    with run_scripted(held_stream(released, WAIT_S)) as worker:
        gateway = start_gateway(
            {HELD_MODEL: worker.url}, SLUICEGATE_SHUTDOWN_DELAY="0", SLUICEGATE_DRAIN_TIMEOUT=FOREVER
        )
        with gateway.client() as client:
            stream = client.chat.completions.create(
                model=HELD_MODEL, messages=[{"role": "user", "content": "a b"}], stream=True
            )
            text = [next(stream).choices[0].delta.content for _ in range(3)]
            gateway.container.signal("TERM")
            _wait(lambda: "draining open requests" in gateway.container.logs(), "it never began draining")
            released.set()  # only now may the stream go on
            text += [c.choices[0].delta.content for c in stream if c.choices]
        assert "".join(t or "" for t in text) == "t0 t1 t2 t3 t4 t5 "
        _exits_cleanly(gateway)
