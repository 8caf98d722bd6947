"""The file storage seam: what the Files and Batch API (gateway/apis/batch, gateway/batch) needs of
a place to keep bytes, and nothing more. Backends live one per module beside this one.

Objects are named by the gateway, never by a client (`team/<team id>/<file id>`), so a name never
holds a path separator the gateway did not put there. Every call is bounded: `write` stops at
`max_bytes`, `read` yields chunks of at most `CHUNK_BYTES`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

CHUNK_BYTES = 1 << 20


class StorageError(Exception):
    """The store failed (unreachable, refused, full). Its message never names the store's address
    or credentials: it is the backend's error class and the operation."""


class TooLarge(Exception):
    """A write went past its `max_bytes`; nothing of it was kept."""


@dataclass(frozen=True, slots=True)
class StoredObject:
    name: str
    size: int
    modified_at: float  # Unix seconds


class FileStorage(Protocol):
    async def write(self, name: str, chunks: AsyncIterator[bytes], *, max_bytes: int) -> int:
        """Streams `chunks` into `name`, never holding the whole object; returns its size. The
        object appears whole or not at all: on any failure, or past `max_bytes` (TooLarge), what
        was written is removed (a multipart upload is aborted)."""
        ...

    def read(self, name: str, *, start: int = 0, end: int | None = None) -> AsyncIterator[bytes]:
        """The bytes [start, end) of `name` (end None: to its end), as chunks. FileNotFoundError
        when there is no such object."""
        ...

    async def stat(self, name: str) -> StoredObject | None: ...

    async def delete(self, names: Sequence[str]) -> None:
        """Removes what exists of `names`; a missing name is not an error."""
        ...

    def list(self, prefix: str) -> AsyncIterator[StoredObject]:
        """Every object whose name starts with `prefix` (for retention sweeps)."""
        ...

    async def close(self) -> None: ...
