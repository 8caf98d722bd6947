"""Fixtures of the pipeline tests: a hostile worker on two loopback ports (two endpoints of one
model, so a retry on another endpoint is counted too)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pipeline.hostile import HostileWorker, run_hostile


@pytest.fixture
def hostile() -> Iterator[HostileWorker]:
    with run_hostile(ports=2) as worker:
        yield worker
