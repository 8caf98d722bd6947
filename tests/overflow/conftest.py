"""A real HTTPS provider (the fake worker behind a private test CA) and gateways whose model
overflows to it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.model_file import parse_model_table
from gateway.model_table import ModelTable
from tests.conftest import Gateway
from tests.overflow.provider import PROVIDER_MODEL, Provider, run_provider

MODEL = "fake-model"  # the session fake worker serves it
KEY_ENV = "SG_TEST_OVERFLOW_KEY"
POOL_PRICE = {"input_per_million": "0.20", "output_per_million": "0.80"}
PROVIDER_PRICE = {"input_per_million": "3.00", "output_per_million": "15.00"}


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    with run_provider(Path(tmp_path_factory.mktemp("provider-tls"))) as running:
        yield running


@pytest.fixture(autouse=True)
def provider_key(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, session_log: Any
) -> Iterator[None]:
    """The provider's key in the gateway's environment (where `key_env` names it), among the
    secrets no log line may hold; the provider reset to behave."""
    if "provider" not in request.fixturenames:
        yield
        return
    running: Provider = request.getfixturevalue("provider")
    monkeypatch.setenv(KEY_ENV, running.key)
    session_log.secrets.append(running.key)
    running.mode, running.fake_headers, running.canned, running.peak = "ok", {}, None, 0
    yield


def overflow_table(
    endpoint: str,
    provider: Provider,
    *,
    after_ms: int = 0,
    max_concurrency: int = 4,
    ca_file: bool = True,
    health: dict[str, Any] | None = None,
    timeouts: dict[str, Any] | None = None,
    routing: dict[str, Any] | None = None,
) -> ModelTable:
    """One model (MODEL) on `endpoint`, one request at a time per endpoint, overflowing to `provider`."""
    entry: dict[str, Any] = {
        "name": "cloud",
        "url": provider.url,
        "model": PROVIDER_MODEL,
        "key_env": KEY_ENV,
        "price": PROVIDER_PRICE,
    }
    if ca_file:
        entry["ca_file"] = str(provider.ca_file)
    model: dict[str, Any] = {
        "name": MODEL,
        "endpoints": [{"url": endpoint}],
        "price": POOL_PRICE,
        "routing": {"max_inflight_per_endpoint": 1, "max_queue_wait": 30, **(routing or {})},
        "overflow": {"after_ms": after_ms, "max_concurrency": max_concurrency, "providers": [entry]},
    }
    if health:
        model["health"] = health
    if timeouts:
        model["timeouts"] = timeouts
    return parse_model_table({"models": [model]})


def allowed_team(gw: Gateway, **limits: Any) -> str:
    team = gw.new_team()
    gw.admin.call("PATCH", f"/admin/v1/teams/{team}", {"overflow": "allowed", **limits})
    return team


@contextlib.contextmanager
def busy_pool(gw: Gateway, key: str) -> Iterator[None]:
    """The model's one slot taken: a stream the fake worker holds open after its first token."""
    client = gw.client(key)
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hold"}],
        stream=True,
        extra_headers={"x-fake-hold-after": "1", "x-fake-tokens": "4"},
    )
    try:
        next(iter(stream))  # the worker is answering it: the slot is held
        yield
    finally:
        stream.close()


def chat(gw: Gateway, key: str, **kwargs: Any) -> Any:
    client: openai.OpenAI = gw.client(key)
    return client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "one two three four"}], **kwargs
    )


def refused_at_deadline(gw: Gateway, key: str) -> None:
    """Asserts a request with a 200 ms deadline, sent while the pool is busy and the provider's
    breaker open, is refused: not sent to the provider, it waits for the pool, and its deadline
    refuses it."""
    with pytest.raises(openai.APIStatusError) as raised:
        chat(gw, key, extra_headers={"x-sluicegate-deadline-ms": "200"})
    assert raised.value.body["code"] == "deadline_unreachable"  # type: ignore[index]
