"""An incremental Server-Sent Events splitter that survives arbitrary network chunk boundaries.

The relay forwards whole events as soon as they are complete and reads only their `data` field,
so an event cut across two TCP reads (or a `\\r\\n` cut between its `\\r` and `\\n`) is held
until its blank line arrives, never lost and never forwarded half-way.

Its cost is linear in the bytes received: each read is scanned once, and the pieces of an
unfinished event are kept as a list and joined once, when its blank line comes (re-joining and
re-scanning the whole pending event on every read made one 100 MB line cost seconds of CPU). An
event larger than `max_event_bytes`, pending or complete, stops the parser (`too_large`): nothing
a worker sends can make it hold more than that.
"""

from __future__ import annotations

from typing import NamedTuple


class SSEEvent(NamedTuple):
    """A tuple: made for every event of every stream, at a fraction of a dataclass's cost."""

    raw: bytes  # the event as received, normalised to `\n` line ends, with its blank line
    data: bytes | None  # the joined `data:` lines, or None for a comment / field-only event


class SSEParser:
    __slots__ = ("_max_event_bytes", "_pending", "_pending_size", "_skip_lf", "too_large")

    def __init__(self, max_event_bytes: int) -> None:
        self._max_event_bytes = max_event_bytes
        self._pending: list[bytes] = []  # the pieces of an unfinished event, none of them empty
        self._pending_size = 0
        self._skip_lf = False
        # An event over the limit came: the events before it were returned, nothing after will be.
        self.too_large = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if self.too_large:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]  # the second half of a `\r\n` cut between two reads
        # `find`, not `in`: `bytes in bytes` first tries its operand as an int, and formats the
        # TypeError it then drops (about 2,000 instructions, on every read of every stream).
        if chunk.find(b"\r") >= 0:
            self._skip_lf = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if not chunk:
            return []
        events: list[SSEEvent] = []
        start = self._finish_pending(chunk, events) if self._pending else 0
        if start < 0:
            return events
        limit = self._max_event_bytes
        # The usual read: one or a few small complete events, sliced straight out of the chunk.
        while True:
            end = chunk.find(b"\n\n", start)
            if end < 0:
                break
            if end + 2 - start > limit:
                self._overflow()
                return events
            block = chunk[start : end + 2]
            if chunk.startswith(b"data: ", start) and chunk.find(b"\n", start) == end:
                # The one-line `data: ...` event every OpenAI server sends (_data_of, inlined).
                events.append(SSEEvent(block, block[6:-2]))
            else:
                events.append(SSEEvent(block, _data_of(block)))
            start = end + 2
        if start < len(chunk):
            rest = chunk[start:] if start else chunk
            if len(rest) > limit:
                self._overflow()
            else:
                self._pending.append(rest)
                self._pending_size = len(rest)
        return events

    def _finish_pending(self, chunk: bytes, events: list[SSEEvent]) -> int:
        """Ends the pending event with this read's first blank line, if it has one: where the rest
        of the read starts, or -1 when the whole read went to the pending event (or over the limit)."""
        pending = self._pending
        if pending[-1].endswith(b"\n") and chunk.startswith(b"\n"):
            end = 1  # the blank line cut between the two reads
        else:
            found = chunk.find(b"\n\n")
            end = found + 2 if found >= 0 else -1
        size = self._pending_size + (len(chunk) if end < 0 else end)
        if size > self._max_event_bytes:
            self._overflow()
            return -1
        if end < 0:
            pending.append(chunk)
            self._pending_size = size
            return -1
        pending.append(chunk[:end])
        block = b"".join(pending)
        pending.clear()
        self._pending_size = 0
        events.append(SSEEvent(block, _data_of(block)))
        return end

    def _overflow(self) -> None:
        self.too_large = True
        self._pending.clear()  # what was held goes now: the stream is ending
        self._pending_size = 0

    @property
    def pending(self) -> bytes:
        """Bytes of an unfinished event; non-empty at end of stream means it was cut short."""
        return b"".join(self._pending)

    @property
    def pending_size(self) -> int:
        """How many bytes the parser holds: never more than `max_event_bytes`."""
        return self._pending_size


def _data_of(block: bytes) -> bytes | None:
    if block.startswith(b"data: ") and block.find(b"\n") == len(block) - 2:
        return block[6:-2]  # the one-line `data: ...` event every OpenAI server sends
    lines: list[bytes] = []
    for line in block[:-2].split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(lines) if lines else None
