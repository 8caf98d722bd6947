"""The gateway's closed set of errors (gateway.errors.ErrorCode) in Anthropic's envelope, mapped
once: `{"type": "error", "error": {"type", "message"}}` with Anthropic's type and status.

When no worker can take a request (every endpoint ejected, the pool's queue full or waited out)
the answer is 529 `overloaded_error`, the status on which Anthropic's SDKs back off and retry.
A worker's own refusal keeps its status, with the type Anthropic gives that status.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import ErrorCode, GatewayError, WorkerRejected

OVERLOADED = 529
PREFIX = "/v1/messages"

# ErrorCode -> (Anthropic error type, status). Every member is here (tests/apis checks it).
_MAPPING: dict[ErrorCode, tuple[str, int]] = {
    ErrorCode.INVALID_JSON: ("invalid_request_error", 400),
    ErrorCode.INVALID_REQUEST: ("invalid_request_error", 400),
    ErrorCode.INVALID_API_KEY: ("authentication_error", 401),
    ErrorCode.ADMIN_UNAUTHORIZED: ("authentication_error", 401),
    ErrorCode.MODEL_NOT_ALLOWED: ("permission_error", 403),
    ErrorCode.ADMIN_DISABLED: ("permission_error", 403),
    ErrorCode.FORBIDDEN: ("permission_error", 403),
    ErrorCode.MODEL_NOT_FOUND: ("not_found_error", 404),
    ErrorCode.NOT_FOUND: ("not_found_error", 404),
    ErrorCode.TEAM_NOT_FOUND: ("not_found_error", 404),
    ErrorCode.KEY_NOT_FOUND: ("not_found_error", 404),
    ErrorCode.METHOD_NOT_ALLOWED: ("invalid_request_error", 405),
    ErrorCode.REQUEST_TIMEOUT: ("timeout_error", 408),
    ErrorCode.TEAM_EXISTS: ("invalid_request_error", 409),
    ErrorCode.KEY_REVOKED: ("invalid_request_error", 409),
    ErrorCode.REQUEST_TOO_LARGE: ("request_too_large", 413),
    ErrorCode.HEADERS_TOO_LARGE: ("invalid_request_error", 431),
    ErrorCode.RATE_LIMIT_EXCEEDED: ("rate_limit_error", 429),
    ErrorCode.INSUFFICIENT_QUOTA: ("rate_limit_error", 429),
    ErrorCode.ADMIN_THROTTLED: ("rate_limit_error", 429),
    ErrorCode.IDP_UNAVAILABLE: ("api_error", 503),
    ErrorCode.INTERNAL_ERROR: ("api_error", 500),
    ErrorCode.WORKER_REJECTED: ("invalid_request_error", 400),
    ErrorCode.UPSTREAM_ERROR: ("api_error", 502),
    ErrorCode.NO_HEALTHY_UPSTREAM: ("overloaded_error", OVERLOADED),
    ErrorCode.REDIS_UNAVAILABLE: ("api_error", 503),
    ErrorCode.POOL_SATURATED: ("overloaded_error", OVERLOADED),
    ErrorCode.QUEUE_TIMEOUT: ("overloaded_error", OVERLOADED),
    ErrorCode.DEADLINE_UNREACHABLE: ("overloaded_error", OVERLOADED),
    ErrorCode.OVERFLOW_UNAVAILABLE: ("overloaded_error", OVERLOADED),
    ErrorCode.OVERFLOW_NOT_ALLOWED: ("overloaded_error", OVERLOADED),
    ErrorCode.SHUTTING_DOWN: ("overloaded_error", OVERLOADED),
    ErrorCode.SERVER_BUSY: ("overloaded_error", OVERLOADED),
    ErrorCode.IDP_UNAVAILABLE: ("api_error", 503),
    ErrorCode.UPSTREAM_TIMEOUT: ("api_error", 504),
}

# A worker's 4xx, by its status.
_TYPES_BY_STATUS = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
}

ERROR_TYPES = frozenset({kind for kind, _ in _MAPPING.values()} | set(_TYPES_BY_STATUS.values()))


def type_and_status(error: GatewayError) -> tuple[str, int]:
    if isinstance(error, WorkerRejected):
        return _TYPES_BY_STATUS.get(error.status, "invalid_request_error"), error.status
    return _MAPPING[error.code]


def error_body(error: GatewayError) -> bytes:
    kind, _ = type_and_status(error)
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": error.message}})


def error_response(error: GatewayError) -> Response:
    _, status = type_and_status(error)
    return Response(
        error_body(error), status_code=status, headers=error.headers, media_type="application/json"
    )


def error_event(error: GatewayError) -> bytes:
    """The `error` event that ends a stream which had begun."""
    return b"event: error\ndata: " + error_body(error) + b"\n\n"


def looks_anthropic(request: Request) -> bool:
    """A request to a path the gateway does not serve is Anthropic's when its path is under
    `/v1/messages` or it carries `anthropic-version` (which every Anthropic SDK sends)."""
    path = request.url.path
    return path == PREFIX or path.startswith(PREFIX + "/") or "anthropic-version" in request.headers


def unknown_route(status: int, message: str, headers: Mapping[str, str] | None) -> Response:
    """A 404 or 405 (gateway.edge.unknown_routes) in Anthropic's envelope."""
    kind = "not_found_error" if status == 404 else "invalid_request_error"
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return Response(
        orjson.dumps(body), status_code=status, headers=dict(headers or {}), media_type="application/json"
    )
