"""The Files and Batch API's part of the OpenAPI document (gateway.edge.openapi)."""

from __future__ import annotations

from gateway.batch.records import ENDPOINTS
from gateway.edge import openapi_schemas as s
from gateway.edge.openapi_parts import (
    OpenApiPart,
    Schema,
    error_responses,
    ok_response,
    operation,
    path_param,
    query_param,
)

_ERRORS = (400, 401, 403, 404, 429, 503)
_PAGE = [
    query_param("after", {"type": "string"}, "The id of the last item of the previous page."),
    query_param(
        "limit", {"type": "integer", "minimum": 1, "maximum": 100}, "At most this many (default 20)."
    ),
]


def _op(summary: str, *errors: int, **extra: object) -> Schema:
    return operation(
        summary,
        {**ok_response({"type": "object"}), **error_responses(*sorted({*_ERRORS, *errors}))},
        "apiKey",
        tags=["batch"],
        **extra,
    )


def _batch_body() -> Schema:
    return {
        "type": "object",
        "required": ["input_file_id", "endpoint", "completion_window"],
        "properties": {
            "input_file_id": {"type": "string"},
            "endpoint": {"enum": list(ENDPOINTS)},
            "completion_window": {"enum": ["24h"]},
            "metadata": s.nullable({"type": "object", "additionalProperties": {"type": "string"}}),
        },
    }


def paths() -> Schema:
    file_id = [path_param("file_id", {"type": "string"})]
    batch_id = [path_param("batch_id", {"type": "string"})]
    return {
        "/v1/files": {
            "post": _op(
                "Upload a batch input file (multipart/form-data: `purpose=batch`, `file`; at most 200 MB)",
                408,
                413,
            ),
            "get": _op(
                "The team's files, newest first",
                parameters=[
                    *_PAGE,
                    query_param("order", {"enum": ["asc", "desc"]}, "By creation (default desc)."),
                    query_param("purpose", {"type": "string"}, "Only files of this purpose."),
                ],
            ),
        },
        "/v1/files/{file_id}": {
            "get": _op("One file", parameters=file_id),
            "delete": _op("Delete a file", parameters=file_id),
        },
        "/v1/files/{file_id}/content": {
            "get": operation(
                "A file's bytes",
                {
                    **ok_response({"type": "string"}, media="application/octet-stream"),
                    **error_responses(*_ERRORS, 502),
                },
                "apiKey",
                tags=["batch"],
                parameters=file_id,
            )
        },
        "/v1/batches": {
            "post": _op("Create a batch from an uploaded file", 408, 413, body=_batch_body()),
            "get": _op("The team's batches, newest first", parameters=_PAGE),
        },
        "/v1/batches/{batch_id}": {"get": _op("One batch", parameters=batch_id)},
        "/v1/batches/{batch_id}/cancel": {"post": _op("Cancel a batch", parameters=batch_id)},
    }


OPENAPI = OpenApiPart(paths)
