"""Reading a Gemini body: its JSON, its field names (camelCase, or the snake_case spelling that
protobuf JSON accepts too), and the 400 that names a field."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import ErrorCode, GatewayError


def field_error(param: str, problem: str) -> GatewayError:
    return GatewayError(ErrorCode.INVALID_REQUEST, f"'{param}' {problem}.", param=param)


def get(obj: dict[str, Any], name: str) -> Any:
    """A field under its camelCase name, or its snake_case one."""
    if name in obj:
        return obj[name]
    return obj.get("".join(f"_{c.lower()}" if c.isupper() else c for c in name))


def camel(name: str) -> str:
    """A field's camelCase name, whichever spelling came (what `ignored` lists)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def load(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise GatewayError(ErrorCode.INVALID_JSON, "The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise GatewayError(ErrorCode.INVALID_REQUEST, "The request body must be a JSON object.")
    return body


def dumps(value: Any) -> bytes:
    """orjson reads JSON nested 1,024 deep but writes only 254: deeper is the client's mistake."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST, "The request body is nested too deeply (at most 254 levels)."
        ) from None


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value  # not NaN
