"""The Responses API's part of the OpenAPI document (gateway.edge.openapi): `POST /v1/responses`
and the stored-response routes."""

from __future__ import annotations

from gateway.edge import openapi_schemas as s
from gateway.edge.openapi_parts import OpenApiPart, Schema, error_responses, operation, path_param, proxy_path
from gateway.proxy.usage import MAX_TOKENS


def responses_body() -> Schema:
    """gateway.apis.responses.request: what it checks at the top level (items, tools and
    formats are checked there too, and named in its 400s). Settings that need a stored response
    are refused on translated pools."""
    stored_only = {"type": "null", "description": "Needs a stored response: refused on translated pools."}
    string_or_null = s.nullable({"type": "string"})
    # Function and namespace tools are served; hosted ones (web_search...) are dropped, or refused
    # where the model says `hosted_tools: refuse` (gateway.proxy.translation.tool_names).
    function_tool = {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}}}
    named_function = {
        "type": "object",
        "required": ["type", "name"],
        "properties": {"type": {"const": "function"}, "name": {"type": "string", "minLength": 1}},
    }
    properties: Schema = {
        "model": {"type": "string", "minLength": 1, "description": "A model name or alias (GET /v1/models)."},
        "input": {
            "anyOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": {"type": "object"}}]
        },
        "instructions": string_or_null,
        "stream": s.nullable({"type": "boolean"}),
        "max_output_tokens": s.int_field(
            1, "Also what a request reserves against token limits (default 1024).", maximum=MAX_TOKENS
        ),
        "temperature": s.nullable({"type": "number"}),
        "top_p": s.nullable({"type": "number"}),
        "parallel_tool_calls": s.nullable({"type": "boolean"}),
        "tools": s.nullable({"type": "array", "items": function_tool}),
        "tool_choice": {"anyOf": [{"enum": ["auto", "none", "required", None]}, named_function]},
        "text": s.nullable({"type": "object", "properties": {"format": s.nullable({"type": "object"})}}),
        "reasoning": s.nullable({"type": "object", "properties": {"effort": string_or_null}}),
        "user": string_or_null,
        "store": {"enum": [False, None], "description": "`true` needs a stored response."},
        "background": {"enum": [False, None], "description": "`true` needs a stored response."},
        "previous_response_id": stored_only,
        "conversation": stored_only,
    }
    return {
        "type": "object",
        "required": ["model", "input"],
        "properties": properties,
        "additionalProperties": True,
        "description": "OpenAI's Responses body, translated to the worker's chat contract; fields "
        "the chat contract has no use for are ignored.",
    }


def _responses_path() -> Schema:
    path = proxy_path(
        "OpenAI Responses, translated to the worker's chat contract (stateless)", responses_body()
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
    """gateway.apis.responses.stored: translated pools store nothing, so always a 404."""
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


def paths() -> Schema:
    return {"/v1/responses": _responses_path(), **_stored_responses_paths()}


OPENAPI = OpenApiPart(paths)
