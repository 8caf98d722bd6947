"""Gemini's OpenAPI-subset `Schema` (function `parameters`, `responseSchema`) as the JSON Schema a
chat worker's tool and JSON-mode fields take.

    {"type": "OBJECT", "properties": {...}, "required": [...]}   -> {"type": "object", ...}
    "nullable": true                    -> "type": [<type>, "null"]
    "minItems": "2" (int64 as a string, as protobuf JSON writes it)   -> 2
    "propertyOrdering", "example", "TYPE_UNSPECIFIED"   -> dropped (no JSON Schema meaning)

`parametersJsonSchema` / `responseJsonSchema` are JSON Schema already and pass as they are.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import ErrorCode, GatewayError

_INTEGER_FIELDS = frozenset(
    {"minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"}
)
_SCHEMA_FIELDS = ("items", "not")
_DROPPED = frozenset({"propertyOrdering", "property_ordering", "example", "nullable"})
# Protobuf JSON accepts the snake_case spelling of every field too: read under its JSON Schema name.
_SNAKE = {
    "any_of": "anyOf",
    "min_items": "minItems",
    "max_items": "maxItems",
    "min_length": "minLength",
    "max_length": "maxLength",
    "min_properties": "minProperties",
    "max_properties": "maxProperties",
}
_MAX_DEPTH = 64


def json_schema(schema: Any, param: str, depth: int = 0) -> dict[str, Any]:
    if not isinstance(schema, dict):
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"'{param}' must be an object.", param=param)
    if depth > _MAX_DEPTH:
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"'{param}' is nested too deeply.", param=param)
    out: dict[str, Any] = {}
    for raw_name, value in schema.items():
        name = _SNAKE.get(raw_name, raw_name)
        if name in _DROPPED:
            continue
        if not isinstance(name, str):
            continue
        if name == "type":
            if isinstance(value, str) and value.upper() != "TYPE_UNSPECIFIED":
                out["type"] = value.lower()
        elif name == "properties" and isinstance(value, dict):
            out["properties"] = {
                key: json_schema(sub, f"{param}.properties.{key}", depth + 1) for key, sub in value.items()
            }
        elif name in _SCHEMA_FIELDS and isinstance(value, dict):
            out[name] = json_schema(value, f"{param}.{name}", depth + 1)
        elif name == "anyOf" and isinstance(value, list):
            out["anyOf"] = [json_schema(sub, f"{param}.anyOf[{i}]", depth + 1) for i, sub in enumerate(value)]
        elif name in _INTEGER_FIELDS and isinstance(value, str) and value.isdigit():
            out[name] = int(value)
        else:
            out[name] = value
    if schema.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out
