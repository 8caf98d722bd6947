"""The prefix index shared across gateway replicas through Redis, so that two replicas send one
conversation to the same engine.

Every replica keeps its own PrefixIndex (lookups never wait on Redis) and, every `interval_s`:

1. writes what it recorded since the last round as ONE stream entry (XADD, batched): the endpoint
   URL and the new block hashes of each routed request, tagged with this replica's id;
2. reads the entries other replicas added since its last read (XREAD, non-blocking) into its own
   index.

So a chain one replica records is in every other replica's index within about two intervals plus
a Redis round trip (bench/prefix_bench.py measures it). The stream is one key with one hash tag
(gateway.redis.keys.prefix_log), trimmed to about MAX_ENTRIES entries of at most MAX_ENTRY_BYTES
each, and expires TTL_S after the last write. A new replica starts by reading what the stream
still holds: it learns the recent index before its first request, a bounded number of blocks a
round, yielding to the event loop after each entry.

Anyone with access to Redis can write to the stream: entries are parsed defensively (too large,
torn or lying ones skipped), and only records of this replica's own prefix-routed endpoints are
read into the index.

Redis down or slow: the round fails within `timeout_s`, what was to be written stays pending (at
most MAX_PENDING_BLOCKS blocks, oldest dropped first) and routing goes on with the local index;
`sluicegate_prefix_share_failures_total` counts the failed rounds, which back off up to
MAX_BACKOFF_S. No failure ends the loop, and no request ever waits on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from gateway.errors import StoreUnavailable
from gateway.observability.metrics import Metrics
from gateway.routing.prefix import HASH_BYTES, PrefixIndex

log = logging.getLogger("sluicegate.routing")

MAX_ENTRIES = 2_000
MAX_BATCH_BLOCKS = 4_096  # one record: at most 32 KiB of hashes
# One entry, URLs and headers included: the stream holds at most about MAX_ENTRIES x this (128 MiB
# in the worst case, a few MiB in practice: most records are a turn's few new blocks). The reader
# skips a larger entry whole: nothing a gateway writes, so written by something else.
MAX_ENTRY_BYTES = 64 * 1024
MAX_URL_BYTES = 2_048  # an endpoint URL longer than this is not shared (nor read)
MAX_PENDING_BLOCKS = 4 * MAX_BATCH_BLOCKS
TTL_S = 3_600
# Entries per XREAD, and blocks recorded per round before the rest waits for the next: a new
# replica's warm-up (or a burst) never holds the event loop for more than an entry at a time.
_READ_COUNT = 64
_ROUND_BLOCKS = 4 * MAX_BATCH_BLOCKS
# Redis down: rounds back off, doubling from interval_s up to this.
MAX_BACKOFF_S = 5.0
_HEADER = struct.Struct("<HI")  # URL length, block count


def encode(records: Sequence[tuple[str, Sequence[bytes]]]) -> bytes:
    parts: list[bytes] = []
    for url, blocks in records:
        raw_url = url.encode()
        parts.append(_HEADER.pack(len(raw_url), len(blocks)))
        parts.append(raw_url)
        parts.extend(blocks)
    return b"".join(parts)


def decode(payload: bytes) -> list[tuple[str, list[bytes]]]:
    """The records of one entry; a malformed tail (never written by a gateway) is ignored, and so
    is a whole entry larger than MAX_ENTRY_BYTES or a record whose URL is too long."""
    out: list[tuple[str, list[bytes]]] = []
    if len(payload) > MAX_ENTRY_BYTES:
        return out
    at = 0
    while at + _HEADER.size <= len(payload):
        url_len, count = _HEADER.unpack_from(payload, at)
        at += _HEADER.size
        end = at + url_len + count * HASH_BYTES
        if end > len(payload):
            break
        url = payload[at : at + url_len].decode(errors="replace")
        at += url_len
        if count and url_len <= MAX_URL_BYTES:
            out.append((url, [payload[i : i + HASH_BYTES] for i in range(at, end, HASH_BYTES)]))
        at = end
    return out


class PrefixLog(Protocol):
    """The shared stream (gateway/routing/prefix_store.py); each raises StoreUnavailable."""

    async def append(self, fields: dict[bytes, bytes], *, max_entries: int, ttl_s: int) -> None: ...

    async def read(self, after: bytes, count: int) -> list[tuple[bytes, Any]]: ...


class PrefixShare:
    def __init__(
        self,
        store: PrefixLog,
        index: PrefixIndex,
        metrics: Metrics,
        *,
        interval_s: float,
        timeout_s: float,
        active: Callable[[], bool] = lambda: True,
        endpoints: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        """`active`: whether any pool routes by prefix now (an idle share reads nothing).
        `endpoints`: the URLs of the endpoints of this replica's prefix-routed pools, each mapped
        to the string its pool holds: a record for any other URL (an endpoint this replica does
        not route to, or one made up by whoever else can write to Redis) is not read into the
        index, and the ones read share their URL string instead of holding a copy each."""
        self._store = store
        self._index = index
        self._metrics = metrics
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._active = active
        self._endpoints = endpoints
        self._failures = 0  # rounds failed in a row
        self.replica = os.urandom(8).hex().encode()
        self._pending: deque[tuple[str, Sequence[bytes]]] = deque()
        self._pending_blocks = 0
        self._last_id: bytes = b"0"  # the whole (bounded) stream first: a new replica warms up
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def note(self, url: str, blocks: Sequence[bytes]) -> None:
        """A request was sent to `url` with these new blocks: written at the next round."""
        if not blocks or len(url.encode()) > MAX_URL_BYTES:
            return
        self._pending.append((url, blocks))
        self._pending_blocks += len(blocks)
        while self._pending_blocks > MAX_PENDING_BLOCKS:
            _, dropped = self._pending.popleft()
            self._pending_blocks -= len(dropped)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _forever(self) -> None:
        while True:
            await self.round()
            await asyncio.sleep(self.delay())

    def delay(self) -> float:
        """Until the next round: the interval, doubled for each failed round in a row (Redis down
        answers at once: no retrying it 20 times a second), at most MAX_BACKOFF_S."""
        if not self._failures:
            return self._interval_s
        backoff: float = self._interval_s * 2.0 ** min(self._failures, 16)
        return min(backoff, max(MAX_BACKOFF_S, self._interval_s))

    async def round(self) -> None:
        """One sync if any pool routes by prefix; a failure of any kind is counted, logged once
        per outage and retried: it never ends the loop."""
        if not self._active():
            return
        try:
            async with asyncio.timeout(self._timeout_s):
                await self.sync()
        except (StoreUnavailable, TimeoutError) as exc:
            self._failed(exc, unexpected=False)
        except Exception as exc:  # a bug, or an entry nobody foresaw: logged, and the loop goes on
            self._failed(exc, unexpected=True)
        else:
            if self._failures:
                log.info("prefix index sharing works again")
            self._failures = 0

    def _failed(self, exc: Exception, *, unexpected: bool) -> None:
        self._metrics.prefix_share_failures.inc()
        if not self._failures:  # once per outage, not every round
            if unexpected:
                log.exception("prefix index sharing failed; local index only")
            else:
                reason = exc.reason if isinstance(exc, StoreUnavailable) else type(exc).__name__
                log.warning("prefix index sharing failed (%s); local index only", reason)
        self._failures += 1

    async def sync(self) -> None:
        """One round: write what is pending, then read what the others wrote."""
        await self._flush()
        known = self._endpoints() if self._endpoints is not None else None
        budget = _ROUND_BLOCKS  # a bounded catch-up per round; the rest comes next round
        while budget > 0:
            read, recorded = await self._pull(known)
            budget -= recorded
            if read < _READ_COUNT:
                break

    async def _flush(self) -> None:
        while self._pending:
            batch: list[tuple[str, Sequence[bytes]]] = []
            size = 0  # bytes of the entry
            while self._pending:
                url, pending = self._pending[0]
                # One huge prompt alone: its deepest blocks, which name its whole prefix.
                blocks = pending[-MAX_BATCH_BLOCKS:]
                record_size = _HEADER.size + len(url.encode()) + len(blocks) * HASH_BYTES
                if batch and size + record_size > MAX_ENTRY_BYTES:
                    break
                self._pending.popleft()
                self._pending_blocks -= len(pending)
                batch.append((url, blocks))
                size += record_size
            try:
                entry = {b"r": self.replica, b"d": encode(batch)}
                await self._store.append(entry, max_entries=MAX_ENTRIES, ttl_s=TTL_S)
            except BaseException:
                for record in batch:  # written next round, if still within the bound
                    self.note(*record)
                raise

    async def _pull(self, known: Mapping[str, str] | None) -> tuple[int, int]:
        """Reads the next entries into the index: (entries read, blocks recorded). Each entry is
        parsed defensively (anyone with access to Redis can write one) and the event loop gets a
        turn after each, so a burst of entries never holds up requests."""
        entries = await self._store.read(self._last_id, _READ_COUNT)
        read = recorded = 0
        for entry_id, fields in entries:
            read += 1
            self._last_id = entry_id
            if not isinstance(fields, dict) or fields.get(b"r") == self.replica:
                continue
            payload = fields.get(b"d")
            for url, blocks in decode(payload if isinstance(payload, bytes) else b""):
                if known is not None:
                    found = known.get(url)
                    if found is None:
                        continue
                    url = found
                self._index.record(blocks, url)
                recorded += len(blocks)
            await asyncio.sleep(0)
        return read, recorded
