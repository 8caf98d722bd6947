"""Gateways with the Files and Batch API on (a file store in a fresh directory per test), in front
of the session's fake worker; helpers to write batch input files and read their output."""

from __future__ import annotations

import contextlib
import io
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory
from tests.servers import run_uvicorn
from workers.fake.app import create_app as create_fake_worker

BatchGateway = contextlib.AbstractContextManager[Gateway]


@pytest.fixture
def files_dir(tmp_path: Path) -> Path:
    return tmp_path / "files"


@pytest.fixture
def batch_gateway(make_gateway: GatewayFactory, files_dir: Path) -> Iterator[Gateway]:
    with make_gateway(files_url=f"file://{files_dir}", batch_poll_interval_s=0.05) as gw:
        yield gw


def chat_lines(count: int, *, model: str = FAKE_MODEL, **body: Any) -> bytes:
    lines = [
        {
            "custom_id": f"r{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": f"hello {i}"}], **body},
        }
        for i in range(count)
    ]
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def upload(client: openai.OpenAI, content: bytes) -> str:
    return client.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch").id


def wait_for_batch(client: openai.OpenAI, batch_id: str, *, within_s: float = 60.0) -> Any:
    deadline = time.monotonic() + within_s
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "expired", "cancelled"):
            return batch
        if time.monotonic() > deadline:
            raise AssertionError(f"batch {batch_id} still {batch.status} after {within_s}s: {batch}")
        time.sleep(0.05)


def jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


class DefaultHeaders:
    """The fake worker with `x-fake-*` programming for requests that send none: a batch line
    carries no client headers, so this is how a test makes its lines slow."""

    def __init__(self, app: Any, headers: dict[str, str]) -> None:
        self.app = app
        self.headers = [(k.encode(), v.encode()) for k, v in headers.items()]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            names = {name for name, _ in scope["headers"]}
            extra = [(k, v) for k, v in self.headers if k not in names]
            scope = {**scope, "headers": [*scope["headers"], *extra]}
        await self.app(scope, receive, send)


@contextlib.contextmanager
def slow_worker(delay_ms: int) -> Iterator[str]:
    with run_uvicorn(
        DefaultHeaders(create_fake_worker([FAKE_MODEL]), {"x-fake-first-token-delay-ms": str(delay_ms)})
    ) as url:
        yield url


def batch_request_counts(client: openai.OpenAI, batch_id: str) -> tuple[str, int, int]:
    batch = client.batches.retrieve(batch_id)
    counts = batch.request_counts
    assert counts is not None
    return batch.status, counts.completed, counts.failed


def metric_values(url: str, name: str) -> list[float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as reply:  # noqa: S310
        text = reply.read().decode()
    return [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name)]
