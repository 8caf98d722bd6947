"""The images `make image` built (dist/*.oci.tar), loaded into podman and run: the gateway's in front
of the test's Redis, the fake worker and a Reframr container (its deterministic engine: no weights
can be fetched here).

`make test` builds the archives first (its `image` target). Without podman the suite is skipped,
saying so; with podman, archives missing or older than their inputs fail it: run `make image`.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SessionLog
from tests.image.podman import IMAGES, ROOT, Container, load, start
from tests.servers import free_port
from tests.workers.test_conformance import MODEL as CONFORMANCE_MODEL

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if shutil.which("podman"):
        return
    skip = pytest.mark.skip(
        reason="podman is not installed: the built images cannot run here "
        "(apt-get install podman runc buildah mmdebstrap; then `make image`)"
    )
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def images() -> dict[str, str]:
    """Each image's name, loaded from its archive (not whatever podman already holds)."""
    check = subprocess.run(
        [str(ROOT / "tools" / "image" / "build.sh"), "--check"], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stderr
    return {name: load(name) for name in IMAGES}


@pytest.fixture(scope="session")
def reframr(images: dict[str, str], session_log: SessionLog) -> Iterator[Container]:
    """The Reframr container the conformance suite and the gateway share: answers of 400 words at
    8 ms each (long enough for the disconnect rules to leave mid-way; the gateway's requests cap
    them), a queue of 8, a 2048-token window, serving the suite's model name."""
    port = free_port()
    args = ["--host", "127.0.0.1", "--port", str(port), "--model-name", CONFORMANCE_MODEL, "--engine", "test"]
    args += ["--answer-tokens", "400", "--token-delay-ms", "8", "--max-model-len", "2048"]
    container = start(images["reframr"], *args, port=port)
    yield container
    session_log.lines.extend(container.logs().splitlines())
    container.remove()
