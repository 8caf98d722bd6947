"""The Reframr worker image, run as the chart runs it (non-root, read-only root), passes the worker
contract's conformance suite (workers/conformance), as its code does in tests/workers."""

from __future__ import annotations

import pytest

from tests.image.podman import Container
from tests.workers.test_conformance import assert_reframr_passes

pytestmark = pytest.mark.timeout(300)


def test_the_reframr_container_passes_the_worker_contract(reframr: Container) -> None:
    assert_reframr_passes(reframr.url)


def test_the_reframr_container_runs_as_a_non_root_user_on_a_read_only_root(reframr: Container) -> None:
    uid = reframr.exec("id", "-u")
    assert uid.stdout.strip() == "10001", uid.stdout + uid.stderr
    write = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('x')"
    denied = reframr.exec("python", "-c", write, "/opt/reframr/probe")
    assert "Read-only file system" in denied.stderr, denied.stderr
    # HOME and numba's cache are under /tmp, which podman mounts writable with --read-only.
    done = reframr.exec("python", "-c", write, "/tmp/numba-probe")
    assert done.returncode == 0, done.stderr
