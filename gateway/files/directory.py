"""`DirectoryStorage`: the file storage seam (gateway.files.storage) on a directory, `file:///path`
(a local disk, or a ReadWriteMany volume every replica mounts).

An object is written to a temporary file in its own directory, fsynced, then renamed over its
name: a reader (another replica) sees the whole object or none, never a torn one, and a replica
killed mid-upload leaves only a `.part-*` file that no listing shows. File I/O runs in a thread:
the event loop never waits on a disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from gateway.files.storage import CHUNK_BYTES, StorageError, StoredObject, TooLarge

_PART = ".part-"


class DirectoryStorage:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    @classmethod
    def from_url(cls, url: str) -> DirectoryStorage:
        if not url.startswith("file://"):
            raise ValueError("a directory store's URL is file:///path")
        path = url.removeprefix("file://")
        if not path.startswith("/"):
            raise ValueError("a directory store's URL names an absolute path: file:///path")
        return cls(path)

    def _path(self, name: str) -> Path:
        # Names are the gateway's own (`team/<team id>/<file id>`); refuse anything that could
        # leave the root all the same.
        parts = name.split("/")
        if not name or any(p in ("", ".", "..") or p.startswith(_PART) for p in parts):
            raise StorageError(f"not an object name: {name!r}")
        return self.root.joinpath(*parts)

    async def write(self, name: str, chunks: AsyncIterator[bytes], *, max_bytes: int) -> int:
        path = self._path(name)
        try:
            await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
            temp = path.parent / f"{_PART}{secrets.token_hex(8)}"
            handle = await asyncio.to_thread(open, temp, "wb")
        except OSError as exc:
            raise StorageError(f"directory store: write failed ({type(exc).__name__})") from None
        size = 0
        kept = False
        try:
            async for chunk in chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise TooLarge(f"more than {max_bytes} bytes")
                await asyncio.to_thread(handle.write, chunk)
            await asyncio.to_thread(_sync_close, handle)
            await asyncio.to_thread(os.replace, temp, path)
            kept = True
            return size
        except OSError as exc:
            raise StorageError(f"directory store: write failed ({type(exc).__name__})") from None
        finally:
            if not kept:
                handle.close()
                with contextlib.suppress(OSError):
                    await asyncio.to_thread(os.unlink, temp)

    async def read(self, name: str, *, start: int = 0, end: int | None = None) -> AsyncIterator[bytes]:
        path = self._path(name)
        try:
            handle = await asyncio.to_thread(open, path, "rb")
        except FileNotFoundError:
            raise FileNotFoundError(name) from None
        except OSError as exc:
            raise StorageError(f"directory store: read failed ({type(exc).__name__})") from None
        try:
            await asyncio.to_thread(handle.seek, start)
            left = None if end is None else max(0, end - start)
            while left is None or left > 0:
                size = CHUNK_BYTES if left is None else min(CHUNK_BYTES, left)
                chunk = await asyncio.to_thread(handle.read, size)
                if not chunk:
                    return
                if left is not None:
                    left -= len(chunk)
                yield chunk
        finally:
            handle.close()

    async def stat(self, name: str) -> StoredObject | None:
        try:
            st = await asyncio.to_thread(os.stat, self._path(name))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"directory store: stat failed ({type(exc).__name__})") from None
        return StoredObject(name, st.st_size, st.st_mtime)

    async def delete(self, names: Sequence[str]) -> None:
        for name in names:
            try:
                await asyncio.to_thread(os.unlink, self._path(name))
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StorageError(f"directory store: delete failed ({type(exc).__name__})") from None

    async def list(self, prefix: str) -> AsyncIterator[StoredObject]:
        found = await asyncio.to_thread(_walk, self.root, prefix)
        for item in found:
            yield item

    async def close(self) -> None:
        return None


def _sync_close(handle: object) -> None:
    """Flush, fsync, close: the bytes are on disk before the rename makes them visible."""
    handle.flush()  # type: ignore[attr-defined]
    os.fsync(handle.fileno())  # type: ignore[attr-defined]
    handle.close()  # type: ignore[attr-defined]


def _walk(root: Path, prefix: str) -> list[StoredObject]:
    out: list[StoredObject] = []
    for dirpath, _dirs, files in os.walk(root):
        for file in files:
            if file.startswith(_PART):
                continue
            full = Path(dirpath) / file
            name = full.relative_to(root).as_posix()
            if name.startswith(prefix):
                with contextlib.suppress(FileNotFoundError):
                    st = full.stat()
                    out.append(StoredObject(name, st.st_size, st.st_mtime))
    return sorted(out, key=lambda o: o.name)
