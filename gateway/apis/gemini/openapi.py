"""The Gemini API's part of the OpenAPI document (gateway.edge.openapi): its model methods and
model listings, the key in `x-goog-api-key` or `?key=`, errors in Google's envelope
(`GoogleError`)."""

from __future__ import annotations

from gateway.apis.gemini.errors import STATUSES
from gateway.edge.openapi_parts import JSON, OpenApiPart, Schema, ok_response, operation, response_headers

SECURITY: list[Schema] = [{"googApiKey": []}, {"googApiKeyQuery": []}]
_ERRORS = (400, 401, 403, 404, 413, 429, 502, 503, 504)


def error_schema() -> Schema:
    return {
        "type": "object",
        "required": ["error"],
        "additionalProperties": False,
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message", "status"],
                "properties": {
                    "code": {"type": "integer"},
                    "message": {"type": "string"},
                    "status": {"enum": sorted(STATUSES)},
                    "details": {"type": "array", "items": {"type": "object"}},
                },
            }
        },
    }


def _errors(*statuses: int) -> Schema:
    return {
        str(status): {
            "description": "Error, in Google's envelope (`status`: INVALID_ARGUMENT, NOT_FOUND...).",
            "headers": response_headers(),
            "content": {JSON: {"schema": {"$ref": "#/components/schemas/GoogleError"}}},
        }
        for status in statuses
    }


def _secured(op: Schema) -> Schema:
    op["security"] = [dict(s) for s in SECURITY]
    return op


def _body() -> Schema:
    """gateway.apis.gemini.request.translate: what it checks at the top level."""
    return {
        "type": "object",
        "required": ["contents"],
        "properties": {
            "contents": {"type": "array", "minItems": 1, "items": {"type": "object"}},
            "systemInstruction": {"anyOf": [{"type": "object"}, {"type": "string"}]},
            "tools": {"type": "array", "items": {"type": "object"}},
            "toolConfig": {"type": "object"},
            "generationConfig": {"type": "object"},
        },
        "additionalProperties": True,
        "description": "A GenerateContentRequest (or, for countTokens, {generateContentRequest}).",
    }


def _method() -> Schema:
    summary = "Gemini generateContent, streamGenerateContent, countTokens: `{model}` is `<model>:<method>`"
    answer = ok_response(
        {"type": "object"},
        "A GenerateContentResponse; for streamGenerateContent, its chunks as SSE (`?alt=sse`) or "
        "one JSON array; for countTokens, {totalTokens}.",
    )
    answer["200"]["content"]["text/event-stream"] = {"schema": {"type": "object"}}
    return _secured(
        operation(
            summary,
            {**answer, **_errors(*_ERRORS)},
            None,
            body=_body(),
            tags=["gemini"],
            parameters=[
                {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}},
                {"name": "alt", "in": "query", "required": False, "schema": {"enum": ["sse"]}},
            ],
        )
    )


def paths() -> Schema:
    listing = ok_response({"type": "object", "required": ["models"]}, "The key's models.")
    one = ok_response({"type": "object", "required": ["name"]}, "One of the key's models.")
    model = [{"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}]
    return {
        "/v1beta/models": {
            "get": _secured(
                operation(
                    "The key's models, as Gemini lists them",
                    {**listing, **_errors(401, 503)},
                    None,
                    tags=["gemini"],
                )
            )
        },
        "/v1beta/models/{model}": {
            "post": _method(),
            "get": _secured(
                operation(
                    "One of the key's models, as Gemini shows it",
                    {**one, **_errors(401, 404, 503)},
                    None,
                    tags=["gemini"],
                    parameters=model,
                )
            ),
        },
        "/v1/models/{model}": {"post": _method()},
    }


OPENAPI = OpenApiPart(
    paths,
    schemas=lambda: {"GoogleError": error_schema()},
    security_schemes=lambda: {
        "googApiKey": {"type": "apiKey", "in": "header", "name": "x-goog-api-key"},
        "googApiKeyQuery": {"type": "apiKey", "in": "query", "name": "key"},
    },
)
