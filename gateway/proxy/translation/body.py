"""Opening a client's body, the same way for every client API: JSON, an object, and (for the
APIs that name it there) a `model`; the one shape of a field's 400; and writing the client's
values again for the worker."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import ErrorCode, GatewayError


def field_error(param: str, problem: str) -> GatewayError:
    """`'max_tokens' must be an integer.`, naming the field as `param`."""
    return GatewayError(ErrorCode.INVALID_REQUEST, f"'{param}' {problem}.", param=param)


def open_body(raw: bytes) -> dict[str, Any]:
    try:
        payload = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise GatewayError(ErrorCode.INVALID_JSON, "The request body is not valid JSON.") from None
    if not isinstance(payload, dict):
        raise GatewayError(ErrorCode.INVALID_REQUEST, "The request body must be a JSON object.")
    return payload


def dumps(value: Any) -> bytes:
    """orjson reads JSON nested 1,024 deep but writes only 254 (and no integer past 64 bits): a
    body beyond either is the client's mistake, not the gateway's."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            "The request body holds a value the gateway cannot re-encode (nested too deeply, or an "
            "integer beyond 64 bits).",
        ) from None


def model_of(payload: dict[str, Any]) -> str:
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise field_error("model", "is required and must be a non-empty string")
    return model
