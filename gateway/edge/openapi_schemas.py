"""JSON Schemas of the bodies in the OpenAPI document (gateway.edge.openapi).

Request schemas say what the gateway itself checks, and no more: the OpenAI bodies allow any
other field (they pass through to the worker), so a body these schemas reject is one the gateway
answers with a 4xx, and the generated-input suite (tests/generated) holds it to that. Patterns
and enums come from the code that validates them. Every function builds a fresh tree: a caller
that edits the document in place (a schema tool resolving references) changes nothing here.
"""

from __future__ import annotations

from typing import Any

from gateway.admin.audit import DEFAULT_PAGE as AUDIT_DEFAULT_PAGE
from gateway.admin.audit import MAX_PAGE as AUDIT_MAX_PAGE
from gateway.admin.audit import STREAM_ID_RE
from gateway.errors import ErrorCode
from gateway.keys.store import TEAM_NAME_RE
from gateway.limits.spec import MAX_LIMIT, TOKEN_COUNTS
from gateway.model_table import MODEL_NAME_RE
from gateway.proxy.dialects.anthropic_errors import ERROR_TYPES as ANTHROPIC_ERROR_TYPES
from gateway.proxy.dialects.openai import MAX_CHOICES
from gateway.proxy.usage import MAX_TOKENS

Schema = dict[str, Any]

MAX_GRACE_S = 90 * 86400  # gateway.admin.routes.rotate_key


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def _int(minimum: int, description: str = "", *, maximum: int = MAX_LIMIT) -> Schema:
    schema: Schema = {"type": "integer", "minimum": minimum, "maximum": maximum}
    if description:
        schema["description"] = description
    return nullable(schema)


def openai_body(input_field: str, input_schema: Schema, *, can_stream: bool) -> Schema:
    """gateway.proxy.dialects.openai.OpenAIDialect.parse."""
    properties: Schema = {
        "model": {"type": "string", "minLength": 1, "description": "A model name or alias (GET /v1/models)."},
        input_field: input_schema,
        "stream": nullable({"type": "boolean"}) if can_stream else {"enum": [False, None]},
        "max_tokens": _int(
            0,
            "Also what a request reserves against token limits, times max(n, best_of) (default 1024).",
            maximum=MAX_TOKENS,
        ),
        "max_completion_tokens": _int(
            0, "Preferred over max_tokens when both are given.", maximum=MAX_TOKENS
        ),
        "n": _int(1, "Answers returned.", maximum=MAX_CHOICES),
        "best_of": _int(1, "Answers generated (completions).", maximum=MAX_CHOICES),
        "user": {"description": "Passed through; a string is also written to the usage record."},
    }
    if can_stream:
        properties["stream_options"] = nullable(
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


def responses_body() -> Schema:
    """gateway.proxy.dialects.responses_request: what it checks at the top level (items, tools and
    formats are checked there too, and named in its 400s). Settings that need a stored response
    are refused on translated pools."""
    stored_only = {"type": "null", "description": "Needs a stored response: refused on translated pools."}
    string_or_null = nullable({"type": "string"})
    # Function and namespace tools are served; hosted ones (web_search...) are dropped, or refused
    # where the model says `hosted_tools: refuse` (gateway.proxy.dialects.tool_names).
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
        "stream": nullable({"type": "boolean"}),
        "max_output_tokens": _int(
            1, "Also what a request reserves against token limits (default 1024).", maximum=MAX_TOKENS
        ),
        "temperature": nullable({"type": "number"}),
        "top_p": nullable({"type": "number"}),
        "parallel_tool_calls": nullable({"type": "boolean"}),
        "tools": nullable({"type": "array", "items": function_tool}),
        "tool_choice": {"anyOf": [{"enum": ["auto", "none", "required", None]}, named_function]},
        "text": nullable({"type": "object", "properties": {"format": nullable({"type": "object"})}}),
        "reasoning": nullable({"type": "object", "properties": {"effort": string_or_null}}),
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


def team_name() -> Schema:
    return {"type": "string", "pattern": TEAM_NAME_RE.pattern}


def team_filter() -> Schema:
    """An empty `team=` filter is no filter, as the admin API reads its query."""
    return {"type": "string", "pattern": f"^({TEAM_NAME_RE.pattern.strip('^$')})?$"}


def date() -> Schema:
    """YYYY-MM-DD; empty is no bound."""
    return {"type": "string", "pattern": r"^(\d{4}-\d{2}-\d{2})?$"}


def limits(*, budgets: bool, weight: bool | None = None, per_model: bool = True) -> Schema:
    """gateway.limits.spec.parse_limits; unknown fields are ignored. Teams have budgets and a
    weight, keys budgets only (`weight=False`), per-model limits neither."""
    properties: Schema = {
        "rpm": _int(1, "Requests per minute."),
        "tpm": _int(1, "Tokens per minute."),
        "max_concurrency": _int(1, "Requests in flight."),
        "tpm_counts": {"enum": list(TOKEN_COUNTS), "description": "Which tokens `tpm` counts."},
    }
    if budgets:
        properties["daily_tokens"] = _int(1, "Token budget per UTC calendar day.")
        properties["monthly_tokens"] = _int(1, "Token budget per UTC calendar month.")
    if budgets if weight is None else weight:
        properties["weight"] = _int(1, "The team's share of a saturated pool's queue (default 1).")
    if per_model:
        properties["priority"] = _int(
            1, "Band in a saturated pool, 1 (lowest) to 9 (default 5); served first when higher.", maximum=9
        )
        properties["model_limits"] = nullable(
            {
                "type": "object",
                "description": "Model name -> its own rpm, tpm, max_concurrency and tpm_counts.",
                "additionalProperties": limits(budgets=False, per_model=False),
            }
        )
    return {"type": "object", "properties": properties, "additionalProperties": True}


def _with(base: Schema, required: list[str], **properties: Schema) -> Schema:
    schema = {**base, "properties": {**base["properties"], **properties}}
    if required:
        schema["required"] = required
    return schema


def team_create() -> Schema:
    return _with(limits(budgets=True), ["name"], name=team_name())


def _clear() -> Schema:
    return {"type": "array", "items": {"type": "string"}, "description": "Limit names to remove."}


def team_update() -> Schema:
    return _with(limits(budgets=True), [], clear=_clear())


def _expires() -> Schema:
    return {
        "anyOf": [
            {"type": "number", "exclusiveMinimum": 0, "description": "Unix seconds, in the future."},
            {"type": "string", "description": "ISO 8601 date or time (UTC unless it says), in the future."},
        ]
    }


def _models() -> Schema:
    """Names (or aliases) of models the gateway serves; null: every model."""
    return {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": MODEL_NAME_RE.pattern}}


def key_update() -> Schema:
    """Absent fields stay as they are; `models: null` is every model, `expires_at: null` never."""
    return _with(
        limits(budgets=True, weight=False),
        [],
        clear=_clear(),
        models=nullable(_models()),
        expires_at=nullable(_expires()),
    )


def key_create() -> Schema:
    return _with(
        limits(budgets=True, weight=False),
        ["team"],
        team=team_name(),
        name={"type": "string", "maxLength": 200},
        models=nullable(_models()),
        expires_at=nullable(_expires()),
    )


def rotate() -> Schema:
    grace = {
        "type": "number",
        "minimum": 0,
        "maximum": MAX_GRACE_S,
        "description": "How long the old secret keeps working.",
    }
    return {"type": "object", "properties": {"grace_seconds": grace}, "additionalProperties": True}


def key_record() -> Schema:
    """gateway.keys.store.KeyRecord.public, plus the secret where one was just issued."""
    return {
        "type": "object",
        "required": ["id", "team", "name", "models", "limits", "created_at", "revoked", "expires_at"],
        "properties": {
            "id": {"type": "string"},
            "team": {"type": "string"},
            "name": {"type": "string"},
            "models": nullable({"type": "array", "items": {"type": "string"}}),
            "rpm": nullable({"type": "integer"}),
            "limits": {"type": "object"},
            "created_at": {"type": "number"},
            "revoked_at": nullable({"type": "number"}),
            "revoked": {"type": "boolean"},
            "expires_at": nullable({"type": "number"}),
            "last_used_at": nullable({"type": "number", "description": "Its last finished request."}),
            "key": {"type": "string", "description": "The secret: only on creation and rotation."},
        },
    }


def listing(item: Schema) -> Schema:
    return {
        "type": "object",
        "required": ["object", "data"],
        "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": item}},
    }


def audit_listing() -> Schema:
    """gateway.admin.audit: entries newest first; `has_more` when older ones match too."""
    entry = {
        "type": "object",
        "required": ["id", "time", "action", "team", "key_id", "changes", "peer"],
        "properties": {
            "id": {"type": "string", "description": "The stream id (Redis's clock, ms); `before` takes it."},
            "time": {"type": "string", "description": "ISO 8601, UTC."},
            "action": {"type": "string", "description": "team.created, team.updated, key.created, …"},
            "team": {"type": "string"},
            "key_id": nullable({"type": "string"}),
            "changes": {
                "type": "object",
                "description": "{field: [old, new]}; null where a value was or became unset.",
                "additionalProperties": {"type": "array", "minItems": 2, "maxItems": 2},
            },
            "peer": {"type": "string", "description": "The address the change came from."},
        },
    }
    schema = listing(entry)
    schema["required"] = [*schema["required"], "has_more"]
    schema["properties"]["has_more"] = {"type": "boolean"}
    return schema


def audit_before() -> Schema:
    """An entry id from an earlier page; empty is no bound."""
    return {"type": "string", "pattern": f"^({STREAM_ID_RE.pattern})?$"}


def audit_limit() -> Schema:
    return {"type": "integer", "minimum": 1, "maximum": AUDIT_MAX_PAGE, "default": AUDIT_DEFAULT_PAGE}


def readiness() -> Schema:
    return {
        "type": "object",
        "required": ["ready", "checks"],
        "properties": {"ready": {"type": "boolean"}, "checks": {"type": "object"}},
    }


def error() -> Schema:
    """gateway.errors.GatewayError.envelope: the same on every route, public and admin."""
    return {
        "type": "object",
        "required": ["error"],
        "additionalProperties": False,
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type", "param", "code"],
                "additionalProperties": False,
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "param": {"type": ["string", "null"]},
                    "code": {"enum": sorted({c.wire_code for c in ErrorCode})},
                },
            }
        },
    }


def anthropic_messages_body(*, needs_max_tokens: bool) -> Schema:
    """gateway.proxy.dialects.anthropic_request.translate: what it checks at the top level; the
    content blocks are checked there too, and named in its 400s."""
    object_or_null = nullable({"type": "object"})
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
        "system": nullable({"anyOf": [{"type": "string"}, {"type": "array"}]}),
        "stream": nullable({"type": "boolean"}),
        "temperature": nullable({"type": "number"}),
        "top_p": nullable({"type": "number"}),
        "top_k": nullable({"type": "integer"}),
        "stop_sequences": nullable({"type": "array", "items": {"type": "string", "minLength": 1}}),
        "tools": nullable({"type": "array", "items": {"type": "object"}}),
        "tool_choice": object_or_null,
        "metadata": object_or_null,
        "thinking": object_or_null,
    }
    if not needs_max_tokens:
        properties["max_tokens"] = nullable(properties["max_tokens"])
        properties.pop("stream")
    return {
        "type": "object",
        "required": ["model", "messages", *(["max_tokens"] if needs_max_tokens else [])],
        "properties": properties,
        "additionalProperties": True,
        "description": "Anthropic's Messages body, translated to the worker's chat contract.",
    }


def anthropic_error() -> Schema:
    """gateway.proxy.dialects.anthropic_errors: Anthropic's envelope, on the Anthropic routes."""
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
                    "type": {"enum": sorted(ANTHROPIC_ERROR_TYPES)},
                    "message": {"type": "string"},
                },
            },
        },
    }
