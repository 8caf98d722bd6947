"""The Anthropic API's part of the OpenAPI document (gateway.edge.openapi): Messages and
count_tokens, their errors in Anthropic's envelope (`AnthropicError`)."""

from __future__ import annotations

from gateway.apis.anthropic.errors import ERROR_TYPES
from gateway.edge import openapi_schemas as s
from gateway.edge.openapi_parts import (
    ANY_4XX,
    JSON,
    PRIORITY,
    OpenApiPart,
    Schema,
    ok_response,
    operation,
    response_headers,
)
from gateway.proxy.usage import MAX_TOKENS


def messages_body(*, needs_max_tokens: bool) -> Schema:
    """gateway.apis.anthropic.request.translate: what it checks at the top level; the
    content blocks are checked there too, and named in its 400s."""
    object_or_null = s.nullable({"type": "object"})
    properties: Schema = {
        "model": {"type": "string", "minLength": 1, "description": "A model name or alias (GET /v1/models)."},
        "max_tokens": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_TOKENS,
            "description": "Also what a request reserves against token limits.",
        },
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["role", "content"],
                "properties": {
                    # system / developer anywhere: folded into what chat templates accept.
                    "role": {"enum": ["user", "assistant", "system", "developer"]},
                    "content": {"anyOf": [{"type": "string"}, {"type": "array"}]},
                },
            },
        },
        "system": s.nullable({"anyOf": [{"type": "string"}, {"type": "array"}]}),
        "stream": s.nullable({"type": "boolean"}),
        "temperature": s.nullable({"type": "number"}),
        "top_p": s.nullable({"type": "number"}),
        "top_k": s.nullable({"type": "integer"}),
        "stop_sequences": s.nullable({"type": "array", "items": {"type": "string", "minLength": 1}}),
        "tools": s.nullable({"type": "array", "items": {"type": "object"}}),
        "tool_choice": object_or_null,
        "metadata": object_or_null,
        "thinking": object_or_null,
    }
    if not needs_max_tokens:
        properties["max_tokens"] = s.nullable(properties["max_tokens"])
        properties.pop("stream")
    return {
        "type": "object",
        "required": ["model", "messages", *(["max_tokens"] if needs_max_tokens else [])],
        "properties": properties,
        "additionalProperties": True,
        "description": "Anthropic's Messages body, translated to the worker's chat contract.",
    }


def error_schema() -> Schema:
    """gateway.apis.anthropic.errors: Anthropic's envelope, on the Anthropic routes."""
    return {
        "type": "object",
        "required": ["type", "error"],
        "additionalProperties": False,
        "properties": {
            "type": {"const": "error"},
            "error": {
                "type": "object",
                "required": ["type", "message"],
                "additionalProperties": False,
                "properties": {
                    "type": {"enum": sorted(ERROR_TYPES)},
                    "message": {"type": "string"},
                },
            },
        },
    }


def error_responses(*statuses: int | str) -> Schema:
    """The Anthropic routes' errors, in Anthropic's envelope (gateway.apis.anthropic.errors)."""
    out: Schema = {}
    for status in statuses:
        out[str(status)] = {
            "description": "A worker's own refusal, with its status."
            if status == ANY_4XX
            else "Error: Anthropic's type for this status (529: `overloaded_error`, no worker free).",
            "headers": response_headers(),
            "content": {JSON: {"schema": {"$ref": "#/components/schemas/AnthropicError"}}},
        }
    return out


def paths() -> Schema:
    answer = ok_response(
        {"type": "object"},
        "A Messages answer; Messages SSE events (text/event-stream) when `stream` is true.",
    )
    # Each event named (`event: message_start` ...) as well as typed in its data.
    event = {
        "type": "object",
        "required": ["event", "data"],
        "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
    }
    answer["200"]["content"]["text/event-stream"] = {"schema": event}
    count = ok_response(
        {"type": "object", "required": ["input_tokens"], "properties": {"input_tokens": {"type": "integer"}}},
        "The gateway's estimate (`x-sluicegate-token-count: estimate`): no worker is asked.",
    )
    errors = (400, 401, 403, 404, 413, 429, 502, 503, 504, 529, ANY_4XX)
    return {
        "/v1/messages": {
            "post": operation(
                "Anthropic Messages, translated to the worker's chat contract",
                {**answer, **error_responses(*errors)},
                "apiKey",
                body=messages_body(needs_max_tokens=True),
                tags=["anthropic"],
                parameters=PRIORITY,
            )
        },
        "/v1/messages/count_tokens": {
            "post": operation(
                "The input tokens of a Messages body",
                {**count, **error_responses(400, 401, 403, 404, 413, 503)},
                "apiKey",
                body=messages_body(needs_max_tokens=False),
                tags=["anthropic"],
            )
        },
    }


OPENAPI = OpenApiPart(paths, schemas=lambda: {"AnthropicError": error_schema()})
