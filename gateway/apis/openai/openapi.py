"""The OpenAI API's part of the OpenAPI document (gateway.edge.openapi): chat, completions,
embeddings and the model listings; the body schemas say what gateway.apis.openai.dialect checks."""

from __future__ import annotations

from gateway.apis.openai.dialect import MAX_CHOICES
from gateway.edge import openapi_schemas as s
from gateway.edge.openapi_parts import (
    OpenApiPart,
    Schema,
    error_responses,
    ok_response,
    operation,
    path_param,
    proxy_path,
)
from gateway.proxy.usage import MAX_TOKENS


def openai_body(input_field: str, input_schema: Schema, *, can_stream: bool) -> Schema:
    """gateway.apis.openai.dialect.OpenAIDialect.parse."""
    properties: Schema = {
        "model": {"type": "string", "minLength": 1, "description": "A model name or alias (GET /v1/models)."},
        input_field: input_schema,
        "stream": s.nullable({"type": "boolean"}) if can_stream else {"enum": [False, None]},
        "max_tokens": s.int_field(
            0,
            "Also what a request reserves against token limits, times max(n, best_of) (default 1024).",
            maximum=MAX_TOKENS,
        ),
        "max_completion_tokens": s.int_field(
            0, "Preferred over max_tokens when both are given.", maximum=MAX_TOKENS
        ),
        "n": s.int_field(1, "Answers returned.", maximum=MAX_CHOICES),
        "best_of": s.int_field(1, "Answers generated (completions).", maximum=MAX_CHOICES),
        "user": {"description": "Passed through; a string is also written to the usage record."},
    }
    if can_stream:
        properties["stream_options"] = s.nullable(
            {
                "type": "object",
                "properties": {"include_usage": {}, "continuous_usage_stats": {}},
                "additionalProperties": True,
            }
        )
    return {
        "type": "object",
        "required": ["model", input_field],
        "properties": properties,
        "additionalProperties": True,
        "description": "Fields not listed here pass through to the worker unchanged.",
    }


def messages() -> Schema:
    return {
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "required": ["role"],
            "properties": {"role": {"type": "string"}},
            "additionalProperties": True,
        },
    }


def text_input() -> Schema:
    return {"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1}]}


def paths() -> Schema:
    return {
        "/v1/chat/completions": proxy_path(
            "Chat completion", openai_body("messages", messages(), can_stream=True)
        ),
        "/v1/completions": proxy_path(
            "Text completion", openai_body("prompt", text_input(), can_stream=True)
        ),
        "/v1/embeddings": proxy_path("Embeddings", openai_body("input", text_input(), can_stream=False)),
        "/v1/models": {
            "get": operation(
                "The models (and aliases) the caller's key may use",
                {**ok_response(s.listing({"type": "object"})), **error_responses(401, 503)},
                "apiKey",
                tags=["openai"],
            )
        },
        "/v1/models/{model}": {
            "get": operation(
                "One model or alias the caller's key may use, as its entry in `/v1/models`",
                {**ok_response({"type": "object"}), **error_responses(401, 404, 503)},
                "apiKey",
                tags=["openai"],
                parameters=[path_param("model", {"type": "string"})],
            )
        },
    }


OPENAPI = OpenApiPart(paths)
