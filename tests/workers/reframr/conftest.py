"""One Reframr worker (deterministic engine) per test module, on a real loopback socket."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.servers import run_uvicorn
from tests.workers.reframr.support import MODEL
from workers.reframr import create_app
from workers.reframr.deterministic import DeterministicEngine


@pytest.fixture(scope="module")
def engine() -> DeterministicEngine:
    return DeterministicEngine()


@pytest.fixture(scope="module")
def base_url(engine: DeterministicEngine) -> Iterator[str]:
    with run_uvicorn(create_app(engine, MODEL)) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> Iterator[openai.OpenAI]:
    sdk = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
    yield sdk
    sdk.close()
