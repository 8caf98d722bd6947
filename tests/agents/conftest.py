"""Real coding agents (tests/agents/package.json, installed by tools/agents/install.sh) against a real
gateway in front of a fake worker, in the two pool kinds an operator configures:

- `translated`: the worker speaks the chat contract only; Messages and Responses are translated.
- `native`: `protocols: {messages: native, responses: native}`; the fake worker serves both.

Two taps record what the tests assert: one in front of the gateway (each answer's status and
headers, as the agent received them) and one in front of the worker (the usage each answer
reported). `--agents-results PATH` writes every conversation step's outcome there, from which
tools/agents/matrix.py renders the pass matrix of docs/agents.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.app import create_app
from gateway.config import Settings
from gateway.dev.embedded_redis import EmbeddedRedis
from gateway.model_table import ModelConfig, ModelTable, Protocols
from tests.agents import agents
from tests.agents.usage import reported_usage
from tests.conftest import FAKE_MODEL, Gateway, SessionLog
from tests.servers import listening_socket, run_uvicorn
from workers.fake.app import create_app as create_fake_worker

POOLS = {
    "translated": ModelConfig(name="agents-translated", upstream_model=FAKE_MODEL),
    "native": ModelConfig(
        name="agents-native",
        upstream_model=FAKE_MODEL,
        protocols=Protocols(messages="native", responses="native"),
    ),
}
RESULTS = Path(__file__).parent / "results.json"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--agents-results",
        default=None,
        help="write the agent conversations' step outcomes to this JSON file (tools/agents/matrix.py)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.agents)
            if item.get_closest_marker("real_agent") and not agents.installed():
                item.add_marker(pytest.mark.skip(reason="agents not installed: run tools/agents/install.sh"))


@dataclass
class Exchange:
    path: str
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    request: bytes = b""


class Tap:
    """ASGI middleware that keeps every POST's path, request body, status, response headers and
    response body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.exchanges: list[Exchange] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        exchange = Exchange(scope["path"])
        self.exchanges.append(exchange)

        async def tapped_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                exchange.request += message.get("body", b"")
            return message

        async def tapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                exchange.status = message["status"]
                exchange.headers = {k.decode().lower(): v.decode() for k, v in message.get("headers", [])}
            elif message["type"] == "http.response.body":
                exchange.body += message.get("body", b"")
            await send(message)

        await self.app(scope, tapped_receive, tapped)


@dataclass
class Stack:
    """The gateway (behind its tap), the worker's tap, and where each pool kind's model lives."""

    gateway: Gateway
    gateway_tap: Tap
    worker_tap: Tap
    worker: Any

    def worker_usage(self, since: int) -> tuple[int, int]:
        """(prompt, completion) tokens the worker reported in its answers from index `since` on."""
        totals = [
            reported_usage(e.path, e.body) for e in self.worker_tap.exchanges[since:] if e.status == 200
        ]
        return sum(p for p, _ in totals), sum(c for _, c in totals)


@contextlib.contextmanager
def tapped_gateway(
    redis_url: str,
    table: ModelTable,
    session_log: SessionLog,
    *,
    redis_timeout_s: float = Settings.redis_timeout_s,
) -> Iterator[tuple[Gateway, Tap]]:
    """A real gateway serving `table`, behind a tap that sees what each agent received
    (also used by tests/vllm, in front of a real vLLM, with its own `redis_timeout_s`)."""
    admin_token = "adm-" + secrets.token_urlsafe(32)
    sock = listening_socket()
    settings = Settings(
        redis_url=redis_url,
        admin_token=admin_token,
        host="127.0.0.1",
        port=sock.getsockname()[1],
        spool_path=os.path.join(tempfile.gettempdir(), f"sluicegate-agents-{secrets.token_hex(6)}.spool"),
        redis_timeout_s=redis_timeout_s,
    )
    gateway_tap = Tap(create_app(settings, table))
    with run_uvicorn(gateway_tap, sock=sock, settings=settings) as url:
        gw = Gateway(url=url, admin_token=admin_token, settings=settings, secrets_created=session_log.secrets)
        session_log.secrets.append(admin_token)
        try:
            yield gw, gateway_tap
        finally:
            gw.close()


@pytest.fixture(scope="module")
def stack(redis_server: EmbeddedRedis, session_log: SessionLog) -> Iterator[Stack]:
    worker_app = create_fake_worker([FAKE_MODEL])
    worker_tap = Tap(worker_app)
    with run_uvicorn(worker_tap) as worker_url:
        table = ModelTable(
            tuple(ModelConfig(**{**config.__dict__, "endpoints": (worker_url,)}) for config in POOLS.values())
        )
        with tapped_gateway(redis_server.url, table, session_log) as (gw, gateway_tap):
            yield Stack(gw, gateway_tap, worker_tap, worker_app.state.worker)


@pytest.fixture
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="sluicegate-agent-") as directory:
        yield Path(directory)


class Outcomes:
    """Each conversation step's outcome, by cell `agent|version|pool|feature`; compared with the
    committed results.json (the matrix's source) so that the matrix never says "pass" for a cell
    whose test failed, nor "fail" for one that passes."""

    def __init__(self, record_to: str | None) -> None:
        self.record_to = record_to
        self.cells: dict[str, str] = {}
        self.committed: dict[str, str] = json.loads(RESULTS.read_text())["cells"] if RESULTS.exists() else {}

    def check(self, cell: str, passed: bool, detail: str, *, not_reached: list[str]) -> None:
        """Record the step; fail the test where the outcome contradicts the committed matrix (or, in
        recording mode, where the step failed). A failed step ends the conversation: the cells of
        `not_reached` fail with it."""
        self.cells[cell] = "pass" if passed else "fail"
        if not passed:
            self.cells.update(dict.fromkeys(not_reached, "fail"))
        if self.record_to is not None:
            if not passed:
                pytest.fail(f"{cell} failed:\n{detail}")
            return
        committed = self.committed.get(cell)
        if passed and committed == "fail":
            pytest.fail(f"{cell} passes but tests/agents/results.json says fail: regenerate the matrix")
        if not passed and committed != "fail":
            pytest.fail(f"{cell} failed (the committed matrix says {committed or 'nothing'}):\n{detail}")
        if not passed:
            pytest.xfail(f"{cell} fails, as the committed matrix says")

    def write(self) -> None:
        if self.record_to is None:
            return
        path = Path(self.record_to)
        previous = json.loads(path.read_text())["cells"] if path.exists() else {}
        cells = dict(sorted({**previous, **self.cells}.items()))
        path.write_text(json.dumps({"cells": cells}, indent=1) + "\n")


@pytest.fixture(scope="session")
def outcomes(request: pytest.FixtureRequest) -> Iterator[Outcomes]:
    recorder = Outcomes(request.config.getoption("--agents-results"))
    yield recorder
    recorder.write()
