"""The closed set of errors the gateway answers with, mapped once to HTTP status and OpenAI envelope.

    GatewayError(code, message, param=None, headers=None)
      code: ErrorCode  --  one member per distinct failure a client can see
        400 invalid_json, invalid_request
        401 invalid_api_key, admin_unauthorized
        403 model_not_allowed, admin_disabled,
            forbidden (signed in, but no role that allows this: the message names the role needed)
        404 model_not_found, not_found, team_not_found, key_not_found
        405 method_not_allowed
        408 request_timeout           (the request body did not arrive in time)
        409 team_exists, key_revoked (an admin change to a key that is already revoked)
        413 request_too_large
        429 rate_limit_exceeded, insufficient_quota (a token budget is spent),
            admin_throttled (too many wrong admin tokens from one address)
        431 headers_too_large         (the request line and headers, refused below the app)
        4xx worker_rejected           (a worker refused the request: its status, our envelope)
        499 (no body)                 (the client left: only in our own logs and metrics)
        500 internal_error            (a bug: logged, never a client's fault)
        502 upstream_error            (the worker failed or answered garbage)
        503 no_healthy_upstream, redis_unavailable,
            pool_saturated (every worker busy and the pool's queue full),
            queue_timeout (every worker stayed busy for the pool's max_queue_wait),
            deadline_unreachable (every worker busy: the first token cannot come before the
            request's deadline, x-sluicegate-deadline-ms),
            overflow_unavailable (the pools could not serve in time and the external overflow
            provider failed, refused or is at capacity: the platform's capacity, not the client's limit),
            overflow_not_allowed (the pools cannot serve it, and its team or key does not allow overflow),
            shutting_down (the gateway's drain ran out while the request was in flight),
            server_busy (the gateway holds as many client connections as it may; refused below the app),
            idp_unavailable (the identity provider's keys cannot be fetched to check a new token)
        504 upstream_timeout

Every response body is `{"error": {"message", "type", "param", "code"}}`; every 401 and 403 carries
`x-should-retry: false`, whichever API's envelope it is told in. Messages never contain
a key or any other secret: callers pass only names the client already knows.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import orjson
from starlette.responses import Response


class ErrorCode(enum.Enum):
    # The wire code is part of the value: members that share a status and type stay distinct.
    def __init__(self, wire_code: str, status: int, error_type: str) -> None:
        self.wire_code = wire_code
        self.status = status
        self.error_type = error_type

    INVALID_JSON = ("invalid_json", 400, "invalid_request_error")
    INVALID_REQUEST = ("invalid_request", 400, "invalid_request_error")
    INVALID_API_KEY = ("invalid_api_key", 401, "authentication_error")
    ADMIN_UNAUTHORIZED = ("admin_unauthorized", 401, "authentication_error")
    MODEL_NOT_ALLOWED = ("model_not_allowed", 403, "permission_error")
    ADMIN_DISABLED = ("admin_disabled", 403, "permission_error")
    FORBIDDEN = ("forbidden", 403, "permission_error")
    MODEL_NOT_FOUND = ("model_not_found", 404, "not_found_error")
    NOT_FOUND = ("not_found", 404, "not_found_error")
    TEAM_NOT_FOUND = ("team_not_found", 404, "not_found_error")
    KEY_NOT_FOUND = ("key_not_found", 404, "not_found_error")
    METHOD_NOT_ALLOWED = ("method_not_allowed", 405, "invalid_request_error")
    REQUEST_TIMEOUT = ("request_timeout", 408, "invalid_request_error")
    TEAM_EXISTS = ("team_exists", 409, "invalid_request_error")
    KEY_REVOKED = ("key_revoked", 409, "invalid_request_error")
    REQUEST_TOO_LARGE = ("request_too_large", 413, "invalid_request_error")
    HEADERS_TOO_LARGE = ("headers_too_large", 431, "invalid_request_error")
    RATE_LIMIT_EXCEEDED = ("rate_limit_exceeded", 429, "rate_limit_error")
    INSUFFICIENT_QUOTA = ("insufficient_quota", 429, "insufficient_quota")
    ADMIN_THROTTLED = ("admin_throttled", 429, "rate_limit_error")
    INTERNAL_ERROR = ("internal_error", 500, "server_error")
    # A worker refused the request (4xx): the client gets the worker's status (WorkerRejected).
    WORKER_REJECTED = ("worker_rejected", 400, "invalid_request_error")
    UPSTREAM_ERROR = ("upstream_error", 502, "upstream_error")
    NO_HEALTHY_UPSTREAM = ("no_healthy_upstream", 503, "upstream_error")
    REDIS_UNAVAILABLE = ("redis_unavailable", 503, "server_error")
    POOL_SATURATED = ("pool_saturated", 503, "upstream_error")
    QUEUE_TIMEOUT = ("queue_timeout", 503, "upstream_error")
    DEADLINE_UNREACHABLE = ("deadline_unreachable", 503, "upstream_error")
    # The model's pools cannot serve in time, and the overflow provider failed or is at capacity;
    # or this key's team does not allow overflow (gateway/overflow/).
    OVERFLOW_UNAVAILABLE = ("overflow_unavailable", 503, "upstream_error")
    OVERFLOW_NOT_ALLOWED = ("overflow_not_allowed", 503, "upstream_error")
    SHUTTING_DOWN = ("shutting_down", 503, "server_error")
    SERVER_BUSY = ("server_busy", 503, "server_error")
    IDP_UNAVAILABLE = ("idp_unavailable", 503, "server_error")
    UPSTREAM_TIMEOUT = ("upstream_timeout", 504, "upstream_error")


class Failure(enum.StrEnum):
    """Why a worker attempt or a worker's answer failed: the `reason` label of
    sluicegate_upstream_errors_total and the `error.type` of the attempt's span. A closed set, so
    the label stays bounded; a worker's error status is labelled `status_<n>` (`label`)."""

    CONNECT = "connect"  # the worker could not be reached (retried)
    BAD_RESPONSE = "bad_response"  # a response head that is not HTTP (retried)
    TIMEOUT = "timeout"  # no head before the deadline, or a stream that stopped sending
    STATUS = "status"  # the worker answered an error status
    INVALID_JSON = "invalid_json"  # a whole answer that is not a JSON object
    INVALID_USAGE = "invalid_usage"  # usage counts that cannot be real
    WORKER_ERROR_EVENT = "worker_error_event"  # the stream carried the worker's error
    EVENT_TOO_LARGE = "event_too_large"
    STREAM_TOO_LARGE = "stream_too_large"  # more than the client's translation holds (StreamTooLarge)
    STREAM_TOTAL_TIMEOUT = "stream_total_timeout"
    STREAM_BROKEN = "stream_broken"
    STREAM_TRUNCATED = "stream_truncated"  # the stream ended before its end
    SHUTDOWN = "shutdown"  # the drain ran out with the stream open
    # A whole answer that broke off or timed out while being read.
    ANSWER_BROKEN = "upstream_error"
    ANSWER_TIMEOUT = "upstream_timeout"

    def label(self, status: int = 0) -> str:
        """The metric label: the word, or `status_<n>` for a worker's error status (HTTP
        statuses: bounded)."""
        return f"status_{status}" if self is Failure.STATUS else str(self)


class ConfigError(ValueError):
    """A bad setting or model table at start: it names the variable or field, never a secret."""


class GatewayError(Exception):
    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param
        self.headers = dict(headers or {})
        if code.status in (401, 403):
            # A wrong key or a model the key may not use stays wrong: the Stainless SDKs (Claude
            # Code's among them) otherwise retry a 401 with backoff for minutes before they say so.
            self.headers.setdefault("x-should-retry", "false")

    @property
    def status(self) -> int:
        return self.code.status

    @property
    def error_type(self) -> str:
        return self.code.error_type

    def envelope(self) -> dict[str, dict[str, str | None]]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code.wire_code,
            }
        }

    def body(self) -> bytes:
        return orjson.dumps(self.envelope())

    def sse_event(self) -> bytes:
        """The same error as one SSE event, for failures after a stream has begun."""
        return b"data: " + self.body() + b"\n\n"

    def response(self, extra_headers: Mapping[str, str] | None = None) -> Response:
        headers = {**(extra_headers or {}), **self.headers}
        return Response(self.body(), status_code=self.status, headers=headers, media_type="application/json")


# OpenAI's error types by status, for a worker's refusal.
_TYPES_BY_STATUS = {
    400: "invalid_request_error",
    404: "not_found_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


class WorkerRejected(GatewayError):
    """A worker's 4xx, re-told in the gateway's envelope with the worker's status."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        assert 400 <= status < 500
        super().__init__(ErrorCode.WORKER_REJECTED, message, headers=headers)
        self._status = status

    @property
    def status(self) -> int:
        return self._status

    @property
    def error_type(self) -> str:
        return _TYPES_BY_STATUS.get(self._status, "invalid_request_error")


_HTTP_STATUS_CODES = {
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.REQUEST_TOO_LARGE,
}


def from_http_status(status: int, detail: str) -> GatewayError:
    """Starlette's own HTTPExceptions (unknown route, wrong method) join the closed set here."""
    code = _HTTP_STATUS_CODES.get(
        status, ErrorCode.INVALID_REQUEST if status < 500 else ErrorCode.INTERNAL_ERROR
    )
    return GatewayError(code, detail)
