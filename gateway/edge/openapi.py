"""GET /openapi.json: an OpenAPI 3.1 document of every route the gateway serves.

The one place the HTTP surface is written down for machines: tests/generated checks that its
routes are exactly the app's, and sends generated (valid and invalid) requests from it to a real
gateway. Error responses are described by the codes gateway.errors maps to each status, and the
body schemas (gateway.edge.openapi_schemas) take their patterns from the validating code.
"""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.edge import key_info
from gateway.edge import openapi_schemas as s
from gateway.edge.openapi_admin import admin_paths
from gateway.edge.openapi_parts import (
    ANY_4XX,
    JSON,
    PRIORITY,
    Schema,
    anthropic_error_responses,
    error_responses,
    ok_response,
    operation,
    path_param,
    proxy_path,
    response_headers,
)


def _anthropic_paths() -> Schema:
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
                {**answer, **anthropic_error_responses(*errors)},
                "apiKey",
                body=s.anthropic_messages_body(needs_max_tokens=True),
                tags=["anthropic"],
                parameters=PRIORITY,
            )
        },
        "/v1/messages/count_tokens": {
            "post": operation(
                "The input tokens of a Messages body",
                {**count, **anthropic_error_responses(400, 401, 403, 404, 413, 503)},
                "apiKey",
                body=s.anthropic_messages_body(needs_max_tokens=False),
                tags=["anthropic"],
            )
        },
    }


def _responses_path() -> Schema:
    path = proxy_path(
        "OpenAI Responses, translated to the worker's chat contract (stateless)", s.responses_body()
    )
    # Each event named (`event: response.created` ...) as well as typed in its data.
    event = {
        "type": "object",
        "required": ["event", "data"],
        "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
    }
    path["post"]["responses"]["200"]["content"]["text/event-stream"] = {"schema": event}
    return path


def _stored_responses_paths() -> Schema:
    """gateway.proxy.dialects.responses_stored: translated pools store nothing, so always a 404."""
    response_id = path_param("response_id", {"type": "string"})

    def op(summary: str) -> Schema:
        # 400: an id holding an encoded slash or backslash (refused on every path: edge.middleware).
        return operation(
            summary, error_responses(400, 401, 404, 503), "apiKey", tags=["openai"], parameters=[response_id]
        )

    return {
        "/v1/responses/{response_id}": {
            "get": op("A stored response (none on translated pools: 404)"),
            "delete": op("Delete a stored response (none on translated pools: 404)"),
        },
        "/v1/responses/{response_id}/cancel": {
            "post": op("Cancel a background response (none on translated pools: 404)")
        },
        "/v1/responses/{response_id}/input_items": {
            "get": op("A stored response's input items (none on translated pools: 404)")
        },
    }


def _openai_paths() -> Schema:
    return {
        "/v1/chat/completions": proxy_path(
            "Chat completion", s.openai_body("messages", s.messages(), can_stream=True)
        ),
        "/v1/completions": proxy_path(
            "Text completion", s.openai_body("prompt", s.text_input(), can_stream=True)
        ),
        "/v1/embeddings": proxy_path("Embeddings", s.openai_body("input", s.text_input(), can_stream=False)),
        "/v1/responses": _responses_path(),
        **_stored_responses_paths(),
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
        "/v1/key/info": {
            "get": operation(
                "The caller's key: its limits and its team's, what remains of each now (spends "
                "none of it), and its usage today and this month",
                {**ok_response(key_info.schema()), **error_responses(401, 503)},
                "apiKey",
                tags=["openai"],
            )
        },
    }


def _operations_paths() -> Schema:
    not_ready = {
        "503": {
            "description": "Not ready: the probe's own body, not an error envelope.",
            "headers": response_headers(),
            "content": {JSON: {"schema": s.readiness()}},
        }
    }
    return {
        "/metrics": {
            "get": operation("Prometheus metrics", ok_response({"type": "string"}, media="text/plain"), None)
        },
        "/healthz": {"get": operation("Alive", ok_response({"type": "object"}), None)},
        "/readyz": {
            "get": operation(
                "Ready: Redis answers, and some model has a healthy endpoint (or discovered pools)",
                {**ok_response(s.readiness(), "Ready"), **not_ready},
                None,
            )
        },
        "/openapi.json": {"get": operation("This document", ok_response({"type": "object"}), None)},
    }


def document() -> Schema:
    """A fresh copy each call: callers may edit it."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Sluicegate",
            "version": "0.1.0",
            "description": "An OpenAI-compatible gateway for self-hosted LLMs, and its admin API. "
            "Every error, on every route, is the `Error` envelope.",
        },
        "paths": {**_openai_paths(), **_anthropic_paths(), **admin_paths(), **_operations_paths()},
        "components": {
            "schemas": {"Error": s.error(), "AnthropicError": s.anthropic_error()},
            "parameters": {
                "RequestId": {
                    "name": "x-request-id",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string"},
                    "description": "Your own id, echoed back: up to 128 of A-Za-z0-9._:- (else ignored).",
                },
                "Priority": {
                    "name": "x-sluicegate-priority",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string"},
                    "description": "A lower priority band (1-9) for this request when its pool is "
                    "saturated: it can only lower the key's and team's band; anything else is ignored.",
                },
            },
            "securitySchemes": {
                "apiKey": {"type": "http", "scheme": "bearer", "description": "A key from the admin API."},
                "apiKeyHeader": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "x-api-key",
                    "description": "The same key, as Anthropic's SDKs send it.",
                },
                "adminToken": {"type": "http", "scheme": "bearer", "description": "SLUICEGATE_ADMIN_TOKEN."},
            },
        },
    }


def route() -> Route:
    """Encoded once per app: the document depends on nothing that changes while it runs."""
    body = orjson.dumps(document())

    async def openapi_json(request: Request) -> Response:
        return Response(body, media_type=JSON)

    return Route("/openapi.json", openapi_json, methods=["GET"])


__all__ = ["document", "route"]
