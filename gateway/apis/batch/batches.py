"""OpenAI's Batches API: create (from an uploaded file; validated and run by the engines,
gateway/batch/), retrieve, cancel, list. A batch is its team's: another team's id is a 404."""

from __future__ import annotations

import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.apis.batch.common import Caller, caller, listing, page_params
from gateway.batch.records import ENDPOINTS, FINAL, WINDOWS, Batch, new_batch_id
from gateway.errors import ErrorCode, GatewayError
from gateway.http.body import read_body

_MAX_BODY = 64 * 1024
_MAX_METADATA = 16


def _invalid(message: str, param: str | None = None) -> GatewayError:
    return GatewayError(ErrorCode.INVALID_REQUEST, message, param=param)


def _not_found(batch_id: str) -> GatewayError:
    shown = batch_id if len(batch_id) <= 64 and batch_id.isascii() else "(not a batch id)"
    return GatewayError(ErrorCode.NOT_FOUND, f"No such Batch object: {shown}", param="batch_id")


def _metadata(raw: Any) -> dict[str, str] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or len(raw) > _MAX_METADATA:
        raise _invalid(f"'metadata' must be an object of at most {_MAX_METADATA} pairs.", "metadata")
    for key, value in raw.items():
        if len(key) > 64 or not isinstance(value, str) or len(value) > 512:
            raise _invalid(
                "'metadata' keys are strings of at most 64 characters, values of at most 512.", "metadata"
            )
    return dict(raw)


async def create_batch(request: Request) -> Response:
    who = await caller(request, "batches")
    raw = await read_body(request, _MAX_BODY, 30.0)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise GatewayError(ErrorCode.INVALID_JSON, "The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise _invalid("The request body must be a JSON object.")
    endpoint = body.get("endpoint")
    if not isinstance(endpoint, str) or endpoint not in ENDPOINTS:
        raise _invalid(f"'endpoint' must be one of {', '.join(ENDPOINTS)}.", "endpoint")
    window = body.get("completion_window")
    if not isinstance(window, str) or window not in WINDOWS:
        raise _invalid("'completion_window' must be 24h.", "completion_window")
    metadata = _metadata(body.get("metadata"))
    file_id = body.get("input_file_id")
    if not isinstance(file_id, str):
        raise _invalid(
            "'input_file_id' must be the id of a file uploaded with purpose batch.", "input_file_id"
        )
    service = who.service
    record = await service.files.get(who.team, who.team_id, file_id)
    if record is None:
        shown = file_id if len(file_id) <= 64 and file_id.isascii() else "(not a file id)"
        raise GatewayError(ErrorCode.NOT_FOUND, f"No such File object: {shown}", param="input_file_id")
    if record.purpose != "batch":
        raise _invalid("The input file must have been uploaded with purpose batch.", "input_file_id")
    now = int(time.time())
    batch = Batch(
        id=new_batch_id(),
        team=who.team,
        team_id=who.team_id,
        key_id=who.principal.key.id,
        endpoint=endpoint,
        input_file_id=file_id,
        completion_window=window,
        model="",
        created_at=now,
        expires_at=now + WINDOWS[window],
        retain_until=now + int(service.retention_s),
        metadata=metadata,
    )
    await service.batches.create(batch)
    service.engine.wake()
    return JSONResponse(batch.public())


async def _batch(request: Request) -> tuple[Batch, Caller]:
    who = await caller(request, "batches")
    batch_id = request.path_params["batch_id"]
    batch = await who.service.batches.get(who.team, batch_id, who.team_id)
    if batch is None:
        raise _not_found(batch_id)
    return batch, who


async def retrieve_batch(request: Request) -> Response:
    batch, _ = await _batch(request)
    return JSONResponse(batch.public())


async def cancel_batch(request: Request) -> Response:
    batch, who = await _batch(request)
    if batch.status in FINAL or batch.status == "finalizing":
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            f"Cannot cancel a batch with status {batch.status}.",
            param="batch_id",
        )
    await who.service.batches.stop(batch.team, batch.id, "cancelling")
    who.service.engine.wake()
    again = await who.service.batches.get(batch.team, batch.id, who.team_id)
    return JSONResponse((again or batch).public())


async def list_batches(request: Request) -> Response:
    who = await caller(request, "batches")
    after, limit = page_params(request)
    batches, more = await who.service.batches.page(who.team, who.team_id, after=after, limit=limit)
    return JSONResponse(listing([b.public() for b in batches], more))
