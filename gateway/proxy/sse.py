"""An incremental Server-Sent Events splitter that survives arbitrary network chunk boundaries.

The relay forwards whole events as soon as they are complete and reads only their `data` field,
so an event cut across two TCP reads (or a `\\r\\n` cut between its `\\r` and `\\n`) is held
until its blank line arrives, never lost and never forwarded half-way.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEEvent:
    raw: bytes  # the event as received, normalised to `\n` line ends, with its blank line
    data: bytes | None  # the joined `data:` lines, or None for a comment / field-only event


class SSEParser:
    __slots__ = ("_buffer", "_skip_lf")

    def __init__(self) -> None:
        self._buffer = b""
        self._skip_lf = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if self._skip_lf:
            self._skip_lf = False
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]  # the second half of a `\r\n` cut between two reads
        if b"\r" in chunk:
            self._skip_lf = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buffer = self._buffer + chunk if self._buffer else chunk
        events: list[SSEEvent] = []
        start = 0
        while True:
            end = buffer.find(b"\n\n", start)
            if end < 0:
                break
            block = buffer[start : end + 2]
            events.append(SSEEvent(block, _data_of(block)))
            start = end + 2
        self._buffer = buffer[start:] if start else buffer
        return events

    @property
    def pending(self) -> bytes:
        """Bytes of an unfinished event; non-empty at end of stream means it was cut short."""
        return self._buffer


def _data_of(block: bytes) -> bytes | None:
    if block.startswith(b"data: ") and block.find(b"\n") == len(block) - 2:
        return block[6:-2]  # the one-line `data: ...` event every OpenAI server sends
    lines: list[bytes] = []
    for line in block[:-2].split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(lines) if lines else None
