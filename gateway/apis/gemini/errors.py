"""The gateway's closed set of errors (gateway.errors.ErrorCode) in Google's envelope, mapped once:
`{"error": {"code": <HTTP status>, "message", "status": <google.rpc.Code name>}}`.

The HTTP status is the gateway's own for the error (a client retries the same answers whatever API
it speaks); `status` is the name Google gives that kind of failure. A refusal that says when to
come back (`retry-after`: a limit, a saturated pool) also carries it as Google's `RetryInfo`
detail, which Gemini CLI and the SDKs read to time their retry.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import ErrorCode, GatewayError, WorkerRejected

INVALID_ARGUMENT = "INVALID_ARGUMENT"
UNAUTHENTICATED = "UNAUTHENTICATED"
PERMISSION_DENIED = "PERMISSION_DENIED"
NOT_FOUND = "NOT_FOUND"
RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
UNAVAILABLE = "UNAVAILABLE"
INTERNAL = "INTERNAL"
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"

# ErrorCode -> Google's status name. Every member is here (tests/apis checks it).
_STATUS: dict[ErrorCode, str] = {
    ErrorCode.INVALID_JSON: INVALID_ARGUMENT,
    ErrorCode.INVALID_REQUEST: INVALID_ARGUMENT,
    ErrorCode.INVALID_API_KEY: UNAUTHENTICATED,
    ErrorCode.ADMIN_UNAUTHORIZED: UNAUTHENTICATED,
    ErrorCode.MODEL_NOT_ALLOWED: PERMISSION_DENIED,
    ErrorCode.ADMIN_DISABLED: PERMISSION_DENIED,
    ErrorCode.FORBIDDEN: PERMISSION_DENIED,
    ErrorCode.MODEL_NOT_FOUND: NOT_FOUND,
    ErrorCode.NOT_FOUND: NOT_FOUND,
    ErrorCode.TEAM_NOT_FOUND: NOT_FOUND,
    ErrorCode.KEY_NOT_FOUND: NOT_FOUND,
    ErrorCode.METHOD_NOT_ALLOWED: INVALID_ARGUMENT,
    ErrorCode.REQUEST_TIMEOUT: DEADLINE_EXCEEDED,
    ErrorCode.TEAM_EXISTS: "ALREADY_EXISTS",
    ErrorCode.KEY_REVOKED: "FAILED_PRECONDITION",
    ErrorCode.REQUEST_TOO_LARGE: INVALID_ARGUMENT,
    ErrorCode.HEADERS_TOO_LARGE: INVALID_ARGUMENT,
    ErrorCode.RATE_LIMIT_EXCEEDED: RESOURCE_EXHAUSTED,
    ErrorCode.INSUFFICIENT_QUOTA: RESOURCE_EXHAUSTED,
    ErrorCode.ADMIN_THROTTLED: RESOURCE_EXHAUSTED,
    ErrorCode.IDP_UNAVAILABLE: UNAVAILABLE,
    ErrorCode.INTERNAL_ERROR: INTERNAL,
    ErrorCode.WORKER_REJECTED: INVALID_ARGUMENT,
    ErrorCode.UPSTREAM_ERROR: UNAVAILABLE,
    ErrorCode.NO_HEALTHY_UPSTREAM: UNAVAILABLE,
    ErrorCode.REDIS_UNAVAILABLE: UNAVAILABLE,
    ErrorCode.POOL_SATURATED: UNAVAILABLE,
    ErrorCode.QUEUE_TIMEOUT: UNAVAILABLE,
    ErrorCode.DEADLINE_UNREACHABLE: UNAVAILABLE,
    ErrorCode.OVERFLOW_UNAVAILABLE: UNAVAILABLE,
    ErrorCode.OVERFLOW_NOT_ALLOWED: UNAVAILABLE,
    ErrorCode.IDP_UNAVAILABLE: UNAVAILABLE,
    ErrorCode.SHUTTING_DOWN: UNAVAILABLE,
    ErrorCode.SERVER_BUSY: UNAVAILABLE,
    ErrorCode.UPSTREAM_TIMEOUT: DEADLINE_EXCEEDED,
}

# A worker's 4xx, by its status.
_STATUS_BY_HTTP = {
    401: UNAUTHENTICATED,
    403: PERMISSION_DENIED,
    404: NOT_FOUND,
    408: DEADLINE_EXCEEDED,
    409: "ABORTED",
    429: RESOURCE_EXHAUSTED,
}

STATUSES = frozenset({*_STATUS.values(), *_STATUS_BY_HTTP.values()})
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


def status_name(error: GatewayError) -> str:
    if isinstance(error, WorkerRejected):
        return _STATUS_BY_HTTP.get(error.status, INVALID_ARGUMENT)
    return _STATUS[error.code]


def envelope(error: GatewayError) -> dict[str, object]:
    body: dict[str, object] = {"code": error.status, "message": error.message, "status": status_name(error)}
    retry_after = next((v for k, v in error.headers.items() if k.lower() == "retry-after"), None)
    if retry_after is not None and retry_after.isdigit():
        body["details"] = [{"@type": _RETRY_INFO, "retryDelay": f"{int(retry_after)}s"}]
    return {"error": body}


def error_body(error: GatewayError) -> bytes:
    return orjson.dumps(envelope(error))


def error_response(error: GatewayError) -> Response:
    return Response(
        error_body(error), status_code=error.status, headers=error.headers, media_type="application/json"
    )


def looks_gemini(request: Request) -> bool:
    """A request to a path or method the gateway does not serve is Gemini's when it is under
    `/v1beta/`, names a `:method` under `/v1/models/`, or carries Google's key header."""
    path = request.url.path
    return (
        path.startswith("/v1beta/")
        or (path.startswith("/v1/models/") and ":" in path)
        or "x-goog-api-key" in request.headers
    )


def unknown_route(status: int, message: str, headers: Mapping[str, str] | None) -> Response:
    """A 404 or 405 (gateway.edge.unknown_routes) in Google's envelope."""
    name = NOT_FOUND if status == 404 else INVALID_ARGUMENT
    body = {"error": {"code": status, "message": message, "status": name}}
    return Response(
        orjson.dumps(body), status_code=status, headers=dict(headers or {}), media_type="application/json"
    )
