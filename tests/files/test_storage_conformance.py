"""The FileStorage contract (gateway/files/storage.py), case by case, on every backend: S3Storage on
a real moto_server, and DirectoryStorage on a temporary directory once this tree has it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.files.storage import CHUNK_BYTES, FileStorage, TooLarge
from tests.files.conftest import Backend, chunks_of, on_storage, read_all

DATA = bytes(range(256)) * 4  # 1 KiB, every byte value
BIG = b"0123456789abcdef" * ((6 << 20) // 16) + b"tail"  # past one 5 MiB part


def test_an_object_written_is_read_back_whole_and_stat_tells_its_size(backend: Backend) -> None:
    async def case(storage: FileStorage) -> None:
        written = await storage.write("team/t1/file-a", chunks_of(DATA[:100], DATA[100:]), max_bytes=4096)
        assert written == 1024
        assert await read_all(storage, "team/t1/file-a") == DATA
        stat = await storage.stat("team/t1/file-a")
        assert stat is not None
        assert (stat.name, stat.size) == ("team/t1/file-a", 1024)
        assert stat.modified_at > 0
        # A name written again holds the new bytes only.
        await storage.write("team/t1/file-a", chunks_of(b"short"), max_bytes=4096)
        assert await read_all(storage, "team/t1/file-a") == b"short"

    on_storage(backend, case)


def test_an_empty_object_is_an_object(backend: Backend) -> None:
    async def case(storage: FileStorage) -> None:
        assert await storage.write("team/t1/empty", chunks_of(), max_bytes=10) == 0
        assert await read_all(storage, "team/t1/empty") == b""
        stat = await storage.stat("team/t1/empty")
        assert stat is not None
        assert stat.size == 0

    on_storage(backend, case)


def test_ranges_read_only_their_bytes(backend: Backend) -> None:
    async def case(storage: FileStorage) -> None:
        await storage.write("team/t1/r", chunks_of(DATA), max_bytes=4096)
        assert await read_all(storage, "team/t1/r", 10, 20) == DATA[10:20]
        assert await read_all(storage, "team/t1/r", 1000) == DATA[1000:]
        assert await read_all(storage, "team/t1/r", 0, 3) == DATA[:3]
        assert await read_all(storage, "team/t1/r", 1000, 5000) == DATA[1000:]
        assert await read_all(storage, "team/t1/r", 7, 7) == b""
        assert await read_all(storage, "team/t1/r", 1024) == b""

    on_storage(backend, case)


def test_an_object_past_one_part_streams_back_in_bounded_chunks(backend: Backend) -> None:
    async def case(storage: FileStorage) -> None:
        pieces = [BIG[at : at + 300_000] for at in range(0, len(BIG), 300_000)]
        assert await storage.write("team/t1/big", chunks_of(*pieces), max_bytes=len(BIG)) == len(BIG)
        got = [chunk async for chunk in storage.read("team/t1/big")]
        assert all(len(chunk) <= CHUNK_BYTES for chunk in got)
        assert b"".join(got) == BIG
        start = (5 << 20) - 3  # across the parts' seam
        assert await read_all(storage, "team/t1/big", start, start + 10) == BIG[start : start + 10]

    on_storage(backend, case)


def test_a_missing_object_is_not_found(backend: Backend) -> None:
    async def case(storage: FileStorage) -> None:
        assert await storage.stat("team/t1/nothing") is None
        with pytest.raises(FileNotFoundError):
            await read_all(storage, "team/t1/nothing")

    on_storage(backend, case)


def test_a_write_past_max_bytes_keeps_nothing(backend: Backend) -> None:
    async def case(storage: FileStorage) -> None:
        with pytest.raises(TooLarge):
            await storage.write("team/t1/too-big", chunks_of(DATA, DATA), max_bytes=1500)
        assert await storage.stat("team/t1/too-big") is None
        assert [o.name async for o in storage.list("team/")] == []

    on_storage(backend, case)


class UploadCut(Exception):
    """The body's source failed (the client went away, a batch writer crashed)."""


def test_a_failing_upload_keeps_nothing_and_its_error_reaches_the_caller(backend: Backend) -> None:
    async def failing() -> AsyncIterator[bytes]:
        yield DATA
        raise UploadCut

    async def case(storage: FileStorage) -> None:
        with pytest.raises(UploadCut):
            await storage.write("team/t1/cut", failing(), max_bytes=4096)
        assert await storage.stat("team/t1/cut") is None
        assert [o.name async for o in storage.list("team/")] == []

    on_storage(backend, case)


def test_list_names_what_is_under_a_prefix_and_delete_removes_it(backend: Backend) -> None:
    async def case(storage: FileStorage) -> None:
        for name, body in (("team/t1/a", b"1"), ("team/t1/b", b"22"), ("team/t2/c", b"333")):
            await storage.write(name, chunks_of(body), max_bytes=10)
        found = {o.name: o.size async for o in storage.list("team/t1/")}
        assert found == {"team/t1/a": 1, "team/t1/b": 2}
        assert {o.name async for o in storage.list("")} == {"team/t1/a", "team/t1/b", "team/t2/c"}
        await storage.delete(["team/t1/a", "team/t1/never-was"])
        assert {o.name async for o in storage.list("team/")} == {"team/t1/b", "team/t2/c"}
        assert await storage.stat("team/t1/a") is None
        await storage.delete([])

    on_storage(backend, case)
