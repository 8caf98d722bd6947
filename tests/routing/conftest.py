"""Several programmable workers on real sockets, and helpers to read a gateway's routing state."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gateway.model_table import ModelConfig
from tests.conftest import Gateway
from tests.http import get, post
from tests.routing.worker import ProgrammableWorker
from tests.servers import run_uvicorn

WorkerFactory = Callable[..., tuple[ProgrammableWorker, str]]


@pytest.fixture
def workers() -> Iterator[WorkerFactory]:
    """`workers(models=..., delay_s=..., capacity=...)` -> (worker, url), stopped after the test."""
    started: list[ProgrammableWorker] = []
    with contextlib.ExitStack() as stack:

        def start(models: tuple[str, ...] = ("m",), **kwargs: Any) -> tuple[ProgrammableWorker, str]:
            worker = ProgrammableWorker(models, **kwargs)
            url = stack.enter_context(run_uvicorn(worker.app()))
            started.append(worker)
            return worker, url

        try:
            yield start
        finally:
            for worker in started:  # a stalled request would outlast the server's shutdown grace
                worker.stall = worker.hold = worker.health_hang = worker.metrics_hang = False


def chat(gw: Gateway, key: str, model: str = "m", **extra: Any) -> Any:
    headers = extra.pop("headers", None)
    timeout = extra.pop("timeout", 30)
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}
    return post(f"{gw.url}/v1/chat/completions", body, key=key, headers=headers, timeout=timeout)


def admin_models(gw: Gateway) -> dict[str, Any]:
    models: dict[str, Any] = {m["name"]: m for m in gw.admin.call("GET", "/admin/v1/models")["data"]}
    return models


def endpoint_view(gw: Gateway, model: str, url: str) -> dict[str, Any]:
    for pool in admin_models(gw)[model]["pools"]:
        for endpoint in pool["endpoints"]:
            if endpoint["url"] == url:
                found: dict[str, Any] = endpoint
                return found
    raise AssertionError(f"{url} is not an endpoint of {model}")


def metric(gw: Gateway, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels` (0 when there is none)."""
    text = get(f"{gw.url}/metrics").body.decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def one_model(name: str = "m", **fields: Any) -> ModelConfig:
    return ModelConfig(name=name, **fields)
