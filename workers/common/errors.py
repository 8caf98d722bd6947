"""OpenAI error answers: the envelope, the error type named after the status, and the exception a
worker raises to answer with them."""

from __future__ import annotations

from typing import Any

# vLLM names its error types after the HTTP status, as the OpenAI SDK's exception classes do.
_ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    408: "RequestTimeoutError",
    409: "ConflictError",
    413: "RequestEntityTooLargeError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    500: "InternalServerError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}


def error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "InternalServerError" if status >= 500 else "BadRequestError")


def error_envelope(message: str, err_type: str, code: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


class RequestError(Exception):
    """An error answered as an OpenAI error envelope with `status`.

    `validation`: found by vLLM's request validation (its FastAPI layer) rather than by the
    route's handler. vLLM answers those in the OpenAI envelope on every route, also on routes
    whose own errors have another shape (`/v1/messages`).
    """

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        *,
        err_type: str | None = None,
        validation: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type or error_type(status)
        self.param = param
        self.validation = validation

    def envelope(self) -> dict[str, Any]:
        return error_envelope(self.message, self.err_type, self.status, self.param)


def bad_request(message: str, param: str | None = None) -> RequestError:
    return RequestError(400, message, param)


def validation_error(field: str, message: str) -> RequestError:
    """A 400 as vLLM's request validation words it: type "Bad Request", param "body.<field>"."""
    return RequestError(400, message, f"body.{field}", err_type="Bad Request", validation=True)
