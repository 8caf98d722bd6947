"""A `multipart/form-data` upload read as it arrives: the parts' headers parsed, a file part's
bytes handed on in chunks (to the file store) and never held whole, the body held to a minimum
transfer rate instead of the other routes' size limit and arrival timeout.

Only what the `openai` SDKs send is understood: parts with a `Content-Disposition: form-data;
name=...` header (a `filename` on the file), text fields of a few bytes, one file part.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator

from starlette.requests import ClientDisconnect
from starlette.types import Receive

from gateway.errors import ErrorCode, GatewayError

_MAX_PART_HEAD = 16 * 1024
_MAX_FIELD = 1024
# The SDKs send 2 to 4 parts (purpose, expires_after[anchor], expires_after[seconds], file).
_MAX_PARTS = 16
_BOUNDARY_RE = re.compile(r'boundary="?([0-9A-Za-z\'()+_,\-./:=? ]{1,70})"?')
_PARAM_RE = re.compile(r';\s*([a-zA-Z*]+)="((?:[^"\\]|\\.)*)"')


def boundary_of(content_type: str) -> bytes:
    kind, _, params = content_type.partition(";")
    match = _BOUNDARY_RE.search(params)
    if kind.strip().lower() != "multipart/form-data" or match is None:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            "Upload a file as multipart/form-data with the fields `purpose` and `file`.",
        )
    return match.group(1).rstrip(" ").encode("latin-1")


def malformed(why: str) -> GatewayError:
    return GatewayError(ErrorCode.INVALID_REQUEST, f"The multipart body is malformed: {why}.")


async def body_chunks(
    receive: Receive, *, min_rate: float, window_s: float, max_bytes: int
) -> AsyncIterator[bytes]:
    """The request body's chunks; a client slower than `min_rate` bytes a second over any window of
    `window_s` seconds gets a 408 (a slow link still uploads 200 MB; a stalled one lets go). A body
    past `max_bytes` gets a 413: parts the reader skips (a preamble, a second file, fields it does
    not keep) would otherwise be read for as long as the client sends them."""
    window_start = time.monotonic()
    window_bytes = 0
    total = 0
    while True:
        deadline = window_start + window_s
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                message = await receive()
        except TimeoutError:
            message = None
        now = time.monotonic()
        if now >= deadline:
            if window_bytes < min_rate * window_s:
                raise GatewayError(
                    ErrorCode.REQUEST_TIMEOUT,
                    f"The upload is slower than {int(min_rate)} bytes a second.",
                    headers={"connection": "close"},
                )
            window_start, window_bytes = now, 0
        if message is None:
            continue
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        if message["type"] != "http.request":
            continue
        chunk: bytes = message.get("body", b"")
        window_bytes += len(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise GatewayError(
                ErrorCode.REQUEST_TOO_LARGE,
                f"An upload may hold at most {max_bytes} bytes.",
                headers={"connection": "close"},
            )
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


class MultipartReader:
    """`await next_part()` -> the part's (name, filename), or None after the last; then
    `read()` yields the part's bytes (it must be drained, or `next_part` skips the rest)."""

    def __init__(self, chunks: AsyncIterator[bytes], boundary: bytes) -> None:
        self._chunks = chunks
        # The body's first delimiter has no CRLF before it: one is put there, so every delimiter
        # reads the same.
        self._buf = bytearray(b"\r\n")
        self._delimiter = b"\r\n--" + boundary
        self._ended = False
        self._in_part = False
        self._parts = 0

    async def _fill(self) -> bool:
        if self._ended:
            return False
        try:
            chunk = await anext(self._chunks)
        except StopAsyncIteration:
            self._ended = True
            return False
        self._buf += chunk
        return True

    async def next_part(self) -> tuple[str, str | None] | None:
        async for _ in self.read():  # the rest of a part not read
            pass
        while True:
            at = self._buf.find(self._delimiter)
            if at >= 0:
                del self._buf[: at + len(self._delimiter)]
                break
            keep = len(self._delimiter) - 1
            if len(self._buf) > keep:
                del self._buf[: len(self._buf) - keep]
            if not await self._fill():
                raise malformed("no closing boundary")
        while len(self._buf) < 2:
            if not await self._fill():
                raise malformed("it ends after a boundary")
        if self._buf[:2] == b"--":
            return None
        self._parts += 1
        if self._parts > _MAX_PARTS:
            raise malformed(f"it has more than {_MAX_PARTS} parts")
        while True:
            end = self._buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(self._buf) > _MAX_PART_HEAD:
                raise malformed("a part's headers are too long")
            if not await self._fill():
                raise malformed("a part's headers never end")
        head = bytes(self._buf[:end]).decode("latin-1")
        del self._buf[: end + 4]
        self._in_part = True
        name = filename = None
        for line in head.split("\r\n"):
            key, _, value = line.partition(":")
            if key.strip().lower() == "content-disposition":
                params = dict((k.lower(), v) for k, v in _PARAM_RE.findall(value))
                name, filename = params.get("name"), params.get("filename")
        if name is None:
            raise malformed("a part has no Content-Disposition name")
        return name, filename

    async def read(self) -> AsyncIterator[bytes]:
        while self._in_part:
            at = self._buf.find(self._delimiter)
            if at >= 0:
                part = bytes(self._buf[:at])
                del self._buf[:at]
                self._in_part = False
                if part:
                    yield part
                return
            keep = len(self._delimiter) - 1
            if len(self._buf) > keep:
                part = bytes(self._buf[: len(self._buf) - keep])
                del self._buf[: len(self._buf) - keep]
                yield part
            elif not await self._fill():
                raise malformed("a part never ends")

    async def text(self) -> str:
        parts = []
        size = 0
        async for chunk in self.read():
            size += len(chunk)
            if size > _MAX_FIELD:
                raise malformed("a text field is too long")
            parts.append(chunk)
        try:
            return b"".join(parts).decode()
        except UnicodeDecodeError:
            raise malformed("a text field is not UTF-8") from None
