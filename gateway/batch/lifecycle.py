"""A batch's two steps around its lines, each taken by one replica at a time under a lock that
expires (a replica that dies mid-step leaves it to another):

- validation: the input file read from the store and checked line by line in a thread
  (gateway.batch.validation); a bad file fails the batch with `errors.data[]`, a good one queues
  its lines (batch_start.lua), unless the team's queued lines would pass `max_batch_lines`;
- finalize: the answers written line by line to the output and error files (streamed, never held
  whole; their ids follow from the batch's, so a finalize redone writes the same files), lines the
  window's end stopped named in the error file as `batch_expired`, then the final status.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import orjson

from gateway.batch.batchstore import BatchStore
from gateway.batch.filestore import FileStore
from gateway.batch.records import OUTPUT_PURPOSE, Batch, FileRecord, object_name, output_file_id
from gateway.batch.runner import error_line
from gateway.batch.validation import Validator
from gateway.files.storage import FileStorage
from gateway.keys.store import KeyStore

VALIDATE_LOCK_S = 600.0
FINALIZE_LOCK_S = 600.0
_EXPIRED = ("batch_expired", "This request could not be executed before the completion window expired.")


class Lifecycle:
    def __init__(self, store: BatchStore, files: FileStore, storage: FileStorage, keystore: KeyStore) -> None:
        self._store = store
        self._files = files
        self._storage = storage
        self._keystore = keystore

    async def validate(self, batch: Batch) -> None:
        if not await self._store.lock(batch.team, batch.id, "validator", VALIDATE_LOCK_S):
            return
        try:
            await self._validate(batch)
        finally:
            await self._store.unlock(batch.team, batch.id, "validator")

    async def _validate(self, batch: Batch) -> None:
        record = await self._files.get(batch.team, batch.team_id, batch.input_file_id)
        if record is None:
            await self._store.fail(
                batch, [_error("invalid_file", "The input file is gone.", "input_file_id")]
            )
            return
        validator = Validator(batch.endpoint)
        try:
            async for chunk in self._storage.read(object_name(batch.team_id, batch.input_file_id)):
                await asyncio.to_thread(validator.feed, chunk)
        except FileNotFoundError:
            await self._store.fail(
                batch, [_error("invalid_file", "The input file is gone.", "input_file_id")]
            )
            return
        await asyncio.to_thread(validator.finish)
        if validator.errors:
            await self._store.fail(batch, validator.errors)
            return
        batch.model = validator.model or ""
        await self._store.put_index(batch, await asyncio.to_thread(validator.index))
        team = await self._keystore.team_info(batch.team)
        max_lines = None if team is None else team.limits.max_batch_lines
        if await self._store.start(batch, validator.total, max_lines) == -1:
            queued = await self._store.queued(batch.team)
            await self._store.fail(
                batch,
                [
                    _error(
                        "max_batch_lines",
                        f"The team's queued batch lines ({queued}) and this batch's "
                        f"({validator.total}) would pass its max_batch_lines ({max_lines}); "
                        "try again once some are done.",
                        None,
                    )
                ],
            )

    async def finalize(self, batch: Batch, ending: str) -> None:
        if not await self._store.lock(batch.team, batch.id, "finalizer", FINALIZE_LOCK_S):
            return
        try:
            await self._finalize(batch, ending)
        finally:
            await self._store.unlock(batch.team, batch.id, "finalizer")

    async def _finalize(self, batch: Batch, ending: str) -> None:
        answered: set[int] = set()
        output = await self._write(batch, "output", b"o", answered)
        never_ran = (
            [line for line in range(batch.total) if line not in answered] if ending == "expired" else []
        )
        errors = await self._write(batch, "error", b"e", answered, never_ran)
        await self._store.finish(batch, ending, output, errors, never_ran=len(never_ran))

    async def _write(
        self, batch: Batch, kind: str, mark: bytes, answered: set[int], never_ran: list[int] | None = None
    ) -> str | None:
        """One output file of the batch's answers marked `mark`; None (and no file) when none."""
        file_id = output_file_id(batch.id, kind)
        count = 0

        async def lines() -> AsyncIterator[bytes]:
            nonlocal count
            async for line, value in self._store.results(batch.team, batch.id):
                answered.add(line)
                if value[:1] == mark:
                    count += 1
                    yield value[1:] + b"\n"
            for line in never_ran or ():
                count += 1
                yield error_line(await self._custom_id(batch, line), *_EXPIRED) + b"\n"

        name = object_name(batch.team_id, file_id)
        size = await self._storage.write(name, lines(), max_bytes=1 << 40)
        if not count:
            await self._storage.delete([name])
            return None
        now = int(time.time())
        await self._files.put(
            batch.team,
            FileRecord(
                id=file_id,
                team_id=batch.team_id,
                size=size,
                created_at=now,
                filename=f"{batch.id}_{kind}.jsonl",
                purpose=OUTPUT_PURPOSE,
                expires_at=max(now + 1, batch.retain_until),
            ),
        )
        return file_id

    async def _custom_id(self, batch: Batch, line: int) -> str:
        try:
            start, end = await self._store.span(batch.team, batch.id, line)
            raw = b"".join(
                [
                    chunk
                    async for chunk in self._storage.read(
                        object_name(batch.team_id, batch.input_file_id), start=start, end=end
                    )
                ]
            )
            custom_id = orjson.loads(raw)["custom_id"]
            return str(custom_id)
        except (FileNotFoundError, ValueError, KeyError):
            return f"line-{line + 1}"


def _error(code: str, message: str, param: str | None) -> dict[str, object]:
    return {"code": code, "message": message, "param": param, "line": None}
