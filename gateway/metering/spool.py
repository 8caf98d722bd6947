"""Usage that Redis could not take by shutdown survives in a local file until the next start.

`Meter.stop()` writes what is still pending there as JSON lines; `Meter.start()` reads it back
into the queue and removes the file only once a flush has written all of it. Writes are
idempotent per request id, so a record replayed twice still counts once. One file belongs to one
gateway process at a time (in Kubernetes: a volume per replica that outlives the pod).

What is replayed changes budgets, so a file is trusted only as the gateway wrote it: a regular
file (not a link) owned by the gateway's user and writable by nobody else (its group may write only
if it is one of the gateway's groups, as a Kubernetes fsGroup makes it), and every record of the
right shape, settling only its own team's limits. A file that fails is left where it is, unread,
and logged; the next save replaces it. A missing directory is created private (0700).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import os
import re
import stat
import typing
from collections.abc import Collection
from pathlib import Path
from typing import Any, Protocol

import orjson

from gateway.metering.record import UsageRecord
from gateway.redis import keys as redis_keys

log = logging.getLogger("sluicegate.spool")


class Queue(Protocol):
    """What replay needs of the meter."""

    def submit(self, usage: UsageRecord) -> None: ...

    async def flush(self) -> bool: ...


_FIELD_TYPES = typing.get_type_hints(UsageRecord)
# A spool written by an older version may lack fields added since, if they have defaults.
_REQUIRED = {
    f.name
    for f in dataclasses.fields(UsageRecord)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
}


def _valid(value: Any, expected: Any) -> bool:
    """A parsed JSON value against a field's type (str, int, bool and tuples of them). A record
    of the wrong shape must never reach Redis: its script error would fail every batch it is in."""
    origin, args = typing.get_origin(expected), typing.get_args(expected)
    if origin is tuple:
        if not isinstance(value, list):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_valid(v, args[0]) for v in value)
        return len(value) == len(args) and all(_valid(v, a) for v, a in zip(value, args, strict=True))
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(expected, type) and isinstance(value, expected)


def _as_tuples(value: Any) -> Any:
    return tuple(_as_tuples(v) for v in value) if isinstance(value, list) else value


# settle.lua's argument per kind of limit: "g" seconds per token and tokens (a void's may end in
# ":1"), "c" the request id, "b" tokens or nano-units (a void's may end in ":1", money's ":1:<w>").
_SETTLEMENT_ARGUMENT = {
    "g": re.compile(r"[0-9.e+-]+:-?[0-9]+(:1)?"),
    "c": re.compile(r"[!-~]{1,200}"),
    "b": re.compile(r"-?[0-9]+(:1(:[0-9]+)?)?"),
}


def _settles_own_limits(record: UsageRecord) -> bool:
    """Every settlement names one of the record's own team's limit keys, in settle.lua's shape:
    a record cannot give tokens back to another team, or touch any other key."""
    own = redis_keys.rate_limit(record.team, "")
    for key, kind, argument in record.settlements:
        pattern = _SETTLEMENT_ARGUMENT.get(kind)
        if not key.startswith(own) or pattern is None or not pattern.fullmatch(argument):
            return False
    return True


def _parse(line: bytes) -> UsageRecord | None:
    try:
        raw = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(raw, dict) or not _REQUIRED <= raw.keys() <= _FIELD_TYPES.keys():
        return None
    if not all(_valid(value, _FIELD_TYPES[name]) for name, value in raw.items()):
        return None
    record = UsageRecord(**{name: _as_tuples(value) for name, value in raw.items()})
    if record.prompt_tokens < 0 or record.completion_tokens < 0 or not _settles_own_limits(record):
        return None
    return record


class Spool:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        # While the file holds records that are also back in the queue, a save must replace it:
        # appending would copy them again on every restart that cannot reach Redis.
        self._loaded = False
        self._replay: asyncio.Task[None] | None = None

    def load(self) -> list[UsageRecord]:
        _private_directory(self.path.parent)
        try:
            data = _read_trusted(self.path)
        except FileNotFoundError:
            return []
        except _Untrusted as exc:
            log.error("usage spool %s: not replayed: %s", self.path, exc)
            return []
        except OSError as exc:  # the file stays for a later start; serving matters more
            log.error("usage spool %s: cannot read: %s", self.path, exc)
            return []
        lines = data.splitlines()
        records = [r for r in (_parse(line) for line in lines if line.strip()) if r is not None]
        corrupt = sum(1 for line in lines if line.strip()) - len(records)
        if corrupt:
            log.error("usage spool %s: skipped %d corrupt line(s)", self.path, corrupt)
        self._loaded = True
        return records

    def keep(self, pending: Collection[UsageRecord]) -> None:
        """After the final flush: saves what is still pending, or removes a fully written file."""
        if not pending:
            if self._loaded:
                self.remove()
            return
        data = b"".join(orjson.dumps(dataclasses.asdict(r)) + b"\n" for r in pending)
        try:
            _private_directory(self.path.parent)
            if self._loaded or not _trusted_or_missing(self.path):
                # Replaced whole: a file that is not the gateway's own is never appended to.
                tmp = self.path.with_name(self.path.name + ".tmp")
                _write(tmp, data, "wb")
                os.replace(tmp, self.path)
            else:
                _write(self.path, data, "ab")
        except OSError as exc:
            log.error("usage records lost: %d (cannot write spool %s: %s)", len(pending), self.path, exc)
            return
        log.warning("usage spool %s: %d record(s) kept for the next start", self.path, len(pending))

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self._loaded = False

    def start_replay(self, meter: Queue) -> None:
        """Queues the file's records and removes the file once a flush has written them."""
        records = self.load()
        for record in records:
            meter.submit(record)
        if self._loaded:
            log.info("usage spool %s: replaying %d record(s)", self.path, len(records))
            self._replay = asyncio.ensure_future(self._remove_when_flushed(meter))

    async def stop_replay(self) -> None:
        if self._replay is not None:
            self._replay.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._replay
            self._replay = None

    async def _remove_when_flushed(self, meter: Queue) -> None:
        # A True flush leaves the queue empty, so every replayed record was written by then
        # (by this call or by the meter's own flusher).
        backoff = 0.1
        while not await meter.flush():
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)
        self.remove()
        log.info("usage spool %s: replayed and removed", self.path)


def _write(path: Path, data: bytes, mode: str) -> None:
    if mode == "wb":
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # whatever was there (a link, another user's file) is not written through
    with open(path, mode, opener=_private) as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())  # shutdown is when the node may go away next


def _private(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW, 0o600)


class _Untrusted(Exception):
    """The spool file is not one the gateway wrote (the message says why)."""


def _private_directory(directory: Path) -> None:
    """Creates the spool's directory, private, when it is missing; an existing one is left as the
    deployment made it (a Kubernetes volume's mount point belongs to the kubelet)."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        log.error("usage spool directory %s: cannot create: %s", directory, exc)


def _check(info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise _Untrusted("not a regular file")
    if info.st_uid != os.geteuid():
        raise _Untrusted("owned by another user")
    ours = info.st_gid == os.getegid() or info.st_gid in os.getgroups()
    if info.st_mode & stat.S_IWOTH or (info.st_mode & stat.S_IWGRP and not ours):
        raise _Untrusted("writable by other users")


def _read_trusted(path: Path) -> bytes:
    """The file's bytes, if it is the gateway's own: opened without following a link, and checked
    on the open descriptor, so it cannot be swapped between the check and the read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _Untrusted("a symbolic link") from None
        raise
    with os.fdopen(fd, "rb") as f:
        _check(os.fstat(f.fileno()))
        return f.read()


def _trusted_or_missing(path: Path) -> bool:
    try:
        _check(os.lstat(path))
    except FileNotFoundError:
        return True
    except _Untrusted:
        return False
    return True
