"""OpenAI's Files API for batch input and output: upload (multipart, streamed to the file store),
list, retrieve, content, delete. A file is its team's: another team's id is a 404."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from gateway.apis.batch.common import Caller, caller, listing, page_params
from gateway.apis.batch.upload import MultipartReader, body_chunks, boundary_of, malformed
from gateway.batch.records import MAX_FILE_BYTES, PURPOSES, FileRecord, new_file_id, object_name
from gateway.batch.service import BatchService
from gateway.errors import ErrorCode, GatewayError
from gateway.files.storage import FileStorage, StorageError, TooLarge

# An upload slower than this over any 30 s is cut (a 200 MB file at this rate takes 50 min).
MIN_UPLOAD_RATE = 64 * 1024
RATE_WINDOW_S = 30.0
_MAX_FILENAME = 256
# The multipart body around the file: its parts' headers, boundaries and small fields.
_MAX_OVERHEAD = 1 << 20


def _not_found(file_id: str) -> GatewayError:
    shown = file_id if len(file_id) <= 64 and file_id.isascii() else "(not a file id)"
    return GatewayError(ErrorCode.NOT_FOUND, f"No such File object: {shown}", param="file_id")


def storage_failed() -> GatewayError:
    return GatewayError(ErrorCode.UPSTREAM_ERROR, "The file store failed; try again shortly.")


async def create_file(request: Request) -> Response:
    try:
        return await _create_file(request)
    except ClientDisconnect:  # the client left mid-upload: nothing was kept, no one to answer
        return Response(status_code=400)


async def _create_file(request: Request) -> Response:
    who = await caller(request, "files")
    service = who.service
    reader = MultipartReader(
        body_chunks(
            request.receive,
            min_rate=MIN_UPLOAD_RATE,
            window_s=RATE_WINDOW_S,
            max_bytes=MAX_FILE_BYTES + _MAX_OVERHEAD,
        ),
        boundary_of(request.headers.get("content-type", "")),
    )
    file_id = new_file_id()
    name = object_name(who.team_id, file_id)
    try:
        record = await _kept(reader, service, file_id, who)
    except BaseException:
        # A file part written, then a bad part, a body too long, a client gone or Redis away: no
        # record names those bytes, so they go now (not at the retention sweep, 30 days on).
        with contextlib.suppress(StorageError):
            await service.storage.delete([name])
        raise
    return JSONResponse(record.public())


async def _kept(reader: MultipartReader, service: BatchService, file_id: str, who: Caller) -> FileRecord:
    purpose, stored = await _read_upload(reader, service.storage, file_id, who.team_id, service.retention_s)
    if purpose not in PURPOSES or stored is None:
        if stored is None and purpose in PURPOSES:
            raise malformed("it has no `file` part")
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            f"'purpose' must be one of {', '.join(PURPOSES)} (this gateway keeps batch files only).",
            param="purpose",
        )
    record = dataclasses.replace(stored, purpose=purpose)
    await service.files.put(who.team, record)
    return record


async def _read_upload(
    reader: MultipartReader, storage: FileStorage, file_id: str, team_id: str, retention_s: float
) -> tuple[str | None, FileRecord | None]:
    """The upload's `purpose` and its file, written as `file_id` (its record not yet kept)."""
    name = object_name(team_id, file_id)
    purpose: str | None = None
    stored: FileRecord | None = None
    while (part := await reader.next_part()) is not None:
        field, filename = part
        if field == "purpose":
            purpose = await reader.text()
        elif field == "file" and stored is not None:
            raise malformed("it has two `file` parts")
        elif field == "file":
            if purpose is not None and purpose not in PURPOSES:
                break
            try:
                size = await storage.write(name, reader.read(), max_bytes=MAX_FILE_BYTES)
            except TooLarge:
                raise GatewayError(
                    ErrorCode.REQUEST_TOO_LARGE,
                    f"A batch file may hold at most {MAX_FILE_BYTES} bytes (200 MB).",
                    param="file",
                    headers={"connection": "close"},
                ) from None
            except StorageError:
                raise storage_failed() from None
            now = int(time.time())
            stored = FileRecord(
                id=file_id,
                team_id=team_id,
                size=size,
                created_at=now,
                filename=_shown_filename(filename),
                purpose="",
                expires_at=now + int(retention_s),
            )
        else:
            await reader.text()  # expires_after[...] and the like: bounded, not kept
    return purpose, stored


def _shown_filename(raw: str | None) -> str:
    """The client's filename as a name, not a path: its last component, without control
    characters (a NUL, a terminal escape), bounded. It is only ever shown; objects are named by
    the gateway."""
    name = (raw or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(c for c in name if c.isprintable())[:_MAX_FILENAME]
    return name if name not in ("", ".", "..") else "upload.jsonl"


async def list_files(request: Request) -> Response:
    who = await caller(request, "files")
    after, limit = page_params(request)
    order = request.query_params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise GatewayError(ErrorCode.INVALID_REQUEST, "'order' must be asc or desc.", param="order")
    records, more = await who.service.files.page(
        who.team,
        who.team_id,
        after=after,
        limit=limit,
        descending=order == "desc",
        purpose=request.query_params.get("purpose") or None,
    )
    return JSONResponse(listing([r.public() for r in records], more))


async def _file(request: Request) -> tuple[FileRecord, Caller]:
    who = await caller(request, "files")
    file_id = request.path_params["file_id"]
    record = await who.service.files.get(who.team, who.team_id, file_id)
    if record is None:
        raise _not_found(file_id)
    return record, who


async def retrieve_file(request: Request) -> Response:
    record, _ = await _file(request)
    return JSONResponse(record.public())


async def file_content(request: Request) -> Response:
    record, who = await _file(request)
    file_id = request.path_params["file_id"]
    chunks = who.service.storage.read(object_name(who.team_id, file_id))
    try:
        first = await anext(chunks, b"")
    except FileNotFoundError:
        raise _not_found(file_id) from None
    except StorageError:
        raise storage_failed() from None

    async def body() -> AsyncIterator[bytes]:
        if first:
            yield first
        async for chunk in chunks:
            yield chunk

    return StreamingResponse(
        body(),
        media_type="application/octet-stream",
        headers={"content-length": str(record.size)},
    )


async def delete_file(request: Request) -> Response:
    _, who = await _file(request)
    file_id = request.path_params["file_id"]
    await who.service.files.delete(who.team, file_id)
    # The record is gone, so the bytes are never served; on a store failure the sweep takes them.
    with contextlib.suppress(StorageError):
        await who.service.storage.delete([object_name(who.team_id, file_id)])
    return JSONResponse({"id": file_id, "object": "file", "deleted": True})
