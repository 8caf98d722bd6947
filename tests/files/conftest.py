"""A real S3-protocol server for the file storage tests: moto_server (PyPI `moto[server]`) on a free
loopback port, spoken to through real HTTP by the gateway's own client (aiobotocore). Every test
gets a bucket of its own.

`backend` runs a test on each FileStorage there is: S3Storage, and DirectoryStorage once
gateway/files/directory.py exists (issue 44); before then its cases skip.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from aiobotocore.session import get_session

from gateway.files.s3 import S3Storage
from gateway.files.storage import FileStorage
from tests.servers import free_port
from tests.waiting import wait_until

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client

REGION = "us-east-1"


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    port = free_port()
    binary = Path(sys.executable).with_name("moto_server")
    process = subprocess.Popen(
        [str(binary), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"moto_server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    try:
        wait_until(answers, 30, "moto_server answers")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(autouse=True)
def aws_chain(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Credentials through the standard chain's environment step, and nothing else of this machine's
    (no shared files, no instance metadata, no endpoint variable) reaching the client."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@contextlib.asynccontextmanager
async def admin_client(endpoint: str) -> AsyncIterator[S3Client]:
    """A second client beside the storage's, to make buckets and look behind its back."""
    async with get_session().create_client("s3", endpoint_url=endpoint, region_name=REGION) as s3:
        yield s3


@dataclass
class S3Place:
    endpoint: str
    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}?endpoint={self.endpoint}&region={REGION}&addressing=path"


@pytest.fixture
def s3_place(moto_endpoint: str) -> S3Place:
    bucket = f"files-{secrets.token_hex(6)}"

    async def make() -> None:
        async with admin_client(moto_endpoint) as s3:
            await s3.create_bucket(Bucket=bucket)

    asyncio.run(make())
    return S3Place(moto_endpoint, bucket, "sluicegate/files")


def directory_storage_class() -> Any:
    """DirectoryStorage when this tree has it (issue 44 adds it), else None."""
    if importlib.util.find_spec("gateway.files.directory") is None:
        return None
    return importlib.import_module("gateway.files.directory").DirectoryStorage


@dataclass
class Backend:
    """One FileStorage to run a case on: `open()` makes it on the running loop; `age(name, seconds)`
    makes an object look that much older where the backend allows it (None: it does not)."""

    kind: str
    open: Callable[[], FileStorage]
    age: Callable[[str, float], Awaitable[None]] | None


@pytest.fixture(params=["s3", "directory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "s3":
        place: S3Place = request.getfixturevalue("s3_place")
        return Backend("s3", lambda: S3Storage.from_url(place.url), None)
    directory_class = directory_storage_class()
    if directory_class is None:
        pytest.skip("gateway/files/directory.py is not in this tree (issue 44)")
    root = tmp_path / "files"

    async def age(name: str, seconds: float) -> None:
        path = root.joinpath(*name.split("/"))
        st = path.stat()
        os.utime(path, (st.st_atime - seconds, st.st_mtime - seconds))

    return Backend("directory", lambda: directory_class(root), age)


def on_storage(backend: Backend, case: Callable[[FileStorage], Awaitable[None]]) -> None:
    """Runs `case` on a fresh event loop with the backend's storage, closed afterwards."""

    async def run() -> None:
        storage = backend.open()
        try:
            await case(storage)
        finally:
            await storage.close()

    asyncio.run(run())


async def chunks_of(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def read_all(storage: FileStorage, name: str, start: int = 0, end: int | None = None) -> bytes:
    return b"".join([chunk async for chunk in storage.read(name, start=start, end=end)])
