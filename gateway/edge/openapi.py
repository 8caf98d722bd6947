"""GET /openapi.json: an OpenAPI 3.1 document of every route the gateway serves.

The one place the HTTP surface is written down for machines: tests/generated checks that its
routes are exactly the app's, and sends generated (valid and invalid) requests from it to a real
gateway. Error responses are described by the codes gateway.errors maps to each status, and the
body schemas (gateway.edge.openapi_schemas) take their patterns from the validating code.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.edge import openapi_schemas as s
from gateway.errors import ErrorCode

Schema = dict[str, Any]

_JSON = "application/json"
_ANY_4XX = "4XX"  # a worker's refusal keeps its own status
_PROXY_ERRORS = (400, 401, 403, 404, 413, 429, 502, 503, 504, _ANY_4XX)
# A bad path or query, wrong token, too many wrong tokens, admin API disabled, Redis down.
_ADMIN_ERRORS = (400, 401, 403, 429, 503)
# Codes only the admin API answers with, and codes only the OpenAI API does: each operation's
# error descriptions name the codes its own side can produce.
_ADMIN_ONLY = ("admin_", "team_", "key_")
_API_ONLY = (
    "invalid_api_key",
    "model_",
    "rate_limit_exceeded",
    "insufficient_quota",
    "worker_rejected",
    "upstream_",
    "no_healthy_upstream",
    "pool_saturated",
    "queue_timeout",
)


def _headers() -> Schema:
    return {
        "x-sluicegate-request-id": {
            "description": "The gateway's own id of this request (its access log, its usage record).",
            "schema": {"type": "string"},
        }
    }


def _errors(*statuses: int | str, admin: bool = False) -> Schema:
    """Error responses, each described by the codes ErrorCode maps to its status on this side."""
    other_side = _API_ONLY if admin else _ADMIN_ONLY
    out: Schema = {}
    for status in statuses:
        if status == _ANY_4XX:
            description = "A worker's own refusal, with its status: code `worker_rejected`."
        else:
            codes = [
                c.wire_code
                for c in ErrorCode
                if c.status == status
                and not c.wire_code.startswith(other_side)
                and c is not ErrorCode.WORKER_REJECTED
            ]
            description = "Error: " + ", ".join(f"`{code}`" for code in codes)
        out[str(status)] = {
            "description": description,
            "headers": _headers(),
            "content": {_JSON: {"schema": {"$ref": "#/components/schemas/Error"}}},
        }
    return out


def _ok(schema: Schema, description: str = "OK", status: int = 200, media: str = _JSON) -> Schema:
    return {
        str(status): {
            "description": description,
            "headers": _headers(),
            "content": {media: {"schema": schema}},
        }
    }


def _security(scheme: str | None) -> list[Schema]:
    # An API key may come as a bearer token or, for Anthropic's SDKs, in `x-api-key`: either one.
    if scheme == "apiKey":
        return [{"apiKey": []}, {"apiKeyHeader": []}]
    return [{scheme: []}] if scheme else []


def _op(summary: str, responses: Schema, security: str | None, **extra: Any) -> Schema:
    op: Schema = {
        "summary": summary,
        "security": _security(security),
        "parameters": [{"$ref": "#/components/parameters/RequestId"}, *extra.pop("parameters", [])],
        "responses": responses,
    }
    if "body" in extra:
        body, required = extra.pop("body"), extra.pop("body_required", True)
        op["requestBody"] = {"required": required, "content": {_JSON: {"schema": body}}}
    op.update(extra)
    return op


def _proxy(summary: str, body: Schema) -> Schema:
    answer = _ok(
        {"type": "object"}, "The worker's answer; an SSE stream (text/event-stream) when `stream` is true."
    )
    answer["200"]["content"]["text/event-stream"] = {"schema": {"type": "string"}}
    return {"post": _op(summary, {**answer, **_errors(*_PROXY_ERRORS)}, "apiKey", body=body, tags=["openai"])}


def _anthropic_errors(*statuses: int | str) -> Schema:
    """The Anthropic routes' errors, in Anthropic's envelope (gateway.proxy.dialects.anthropic_errors)."""
    out: Schema = {}
    for status in statuses:
        out[str(status)] = {
            "description": "A worker's own refusal, with its status."
            if status == _ANY_4XX
            else "Error: Anthropic's type for this status (529: `overloaded_error`, no worker free).",
            "headers": _headers(),
            "content": {_JSON: {"schema": {"$ref": "#/components/schemas/AnthropicError"}}},
        }
    return out


def _anthropic_paths() -> Schema:
    answer = _ok(
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
    count = _ok(
        {"type": "object", "required": ["input_tokens"], "properties": {"input_tokens": {"type": "integer"}}},
        "The gateway's estimate (`x-sluicegate-token-count: estimate`): no worker is asked.",
    )
    errors = (400, 401, 403, 404, 413, 429, 502, 503, 504, 529, _ANY_4XX)
    return {
        "/v1/messages": {
            "post": _op(
                "Anthropic Messages, translated to the worker's chat contract",
                {**answer, **_anthropic_errors(*errors)},
                "apiKey",
                body=s.anthropic_messages_body(needs_max_tokens=True),
                tags=["anthropic"],
            )
        },
        "/v1/messages/count_tokens": {
            "post": _op(
                "The input tokens of a Messages body",
                {**count, **_anthropic_errors(400, 401, 403, 404, 413, 503)},
                "apiKey",
                body=s.anthropic_messages_body(needs_max_tokens=False),
                tags=["anthropic"],
            )
        },
    }


def _admin(summary: str, ok: Schema, *errors: int, **extra: Any) -> Schema:
    responses = {**ok, **_errors(*sorted({*_ADMIN_ERRORS, *errors}), admin=True)}
    return _op(summary, responses, "adminToken", tags=["admin"], **extra)


def _query(name: str, schema: Schema, description: str, *, required: bool = False) -> Schema:
    return {"name": name, "in": "query", "required": required, "schema": schema, "description": description}


def _path(name: str, schema: Schema) -> Schema:
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _responses_path() -> Schema:
    path = _proxy(
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
    response_id = _path("response_id", {"type": "string"})

    def op(summary: str) -> Schema:
        # 400: an id holding an encoded slash or backslash (refused on every path: edge.middleware).
        return _op(summary, _errors(400, 401, 404, 503), "apiKey", tags=["openai"], parameters=[response_id])

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
        "/v1/chat/completions": _proxy(
            "Chat completion", s.openai_body("messages", s.messages(), can_stream=True)
        ),
        "/v1/completions": _proxy(
            "Text completion", s.openai_body("prompt", s.text_input(), can_stream=True)
        ),
        "/v1/embeddings": _proxy("Embeddings", s.openai_body("input", s.text_input(), can_stream=False)),
        "/v1/responses": _responses_path(),
        **_stored_responses_paths(),
        "/v1/models": {
            "get": _op(
                "The models (and aliases) the caller's key may use",
                {**_ok(s.listing({"type": "object"})), **_errors(401, 503)},
                "apiKey",
                tags=["openai"],
            )
        },
        "/v1/models/{model}": {
            "get": _op(
                "One model or alias the caller's key may use, as its entry in `/v1/models`",
                {**_ok({"type": "object"}), **_errors(401, 404, 503)},
                "apiKey",
                tags=["openai"],
                parameters=[_path("model", {"type": "string"})],
            )
        },
    }


def _admin_paths() -> Schema:
    key_id = _path("key_id", {"type": "string"})
    usage_ok = _ok(s.listing({"type": "object"}), "Rows as JSON, or CSV with `format=csv`.")
    usage_ok["200"]["content"]["text/csv"] = {"schema": {"type": "string"}}
    return {
        "/admin/v1/teams": {
            "get": _admin("List teams", _ok(s.listing({"type": "object"}))),
            "post": _admin(
                "Create a team", _ok({"type": "object"}, "Created", 201), 400, 409, 413, body=s.team_create()
            ),
        },
        "/admin/v1/teams/{team}": {
            "patch": _admin(
                "Change a team's limits",
                _ok({"type": "object"}),
                400,
                404,
                413,
                parameters=[_path("team", s.team_name())],
                body=s.team_update(),
                body_required=False,
            )
        },
        "/admin/v1/keys": {
            "get": _admin(
                "List a team's keys",
                _ok(s.listing(s.key_record())),
                400,
                404,
                parameters=[_query("team", s.team_name(), "The team.", required=True)],
            ),
            "post": _admin(
                "Create a key (its secret is in the answer, once)",
                _ok(s.key_record(), "Created", 201),
                400,
                404,
                413,
                body=s.key_create(),
            ),
        },
        "/admin/v1/keys/{key_id}": {
            "delete": _admin("Revoke a key", _ok(s.key_record()), 404, parameters=[key_id]),
            "patch": _admin(
                "Change a key's limits",
                _ok(s.key_record()),
                400,
                404,
                413,
                parameters=[key_id],
                body=s.key_update(),
                body_required=False,
            ),
        },
        "/admin/v1/keys/{key_id}/rotate": {
            "post": _admin(
                "Issue a new secret; the old one keeps working for `grace_seconds`",
                _ok(s.key_record()),
                400,
                404,
                413,
                parameters=[key_id],
                body=s.rotate(),
                body_required=False,
            )
        },
        "/admin/v1/usage": {
            "get": _admin(
                "Metered usage per day, team, key, model and client API (`api`; null for usage "
                "recorded before the api was)",
                usage_ok,
                400,
                404,
                parameters=[
                    _query("team", s.team_filter(), "Only this team (default: every team)."),
                    _query("key", {"type": "string"}, "Only this key id."),
                    _query("model", {"type": "string"}, "Only this model."),
                    _query(
                        "api",
                        {"type": "string"},
                        "Only this client API (`chat`, `completions`, `embeddings`, `messages`, "
                        "`responses`).",
                    ),
                    _query("since", s.date(), "First day (UTC), YYYY-MM-DD."),
                    _query("until", s.date(), "Last day (UTC), YYYY-MM-DD."),
                    _query("format", {"type": "string"}, "`csv` for CSV; anything else is JSON."),
                ],
            )
        },
        "/admin/v1/audit": {
            "get": _admin(
                "Admin changes, newest first: action, team, key id, old and new values, address",
                _ok(s.audit_listing()),
                400,
                parameters=[
                    _query("team", s.team_filter(), "Only this team's changes (default: every team)."),
                    _query("since", {"type": "string"}, "Unix seconds or an ISO 8601 date/time (UTC)."),
                    _query("before", s.audit_before(), "Older than this entry id (the next page)."),
                    _query("limit", s.audit_limit(), "At most this many entries."),
                ],
            )
        },
        "/admin/v1/models": {
            "get": _admin(
                "Models, pools and endpoints as this replica sees them", _ok(s.listing({"type": "object"}))
            )
        },
    }


def _operations_paths() -> Schema:
    not_ready = {
        "503": {
            "description": "Not ready: the probe's own body, not an error envelope.",
            "headers": _headers(),
            "content": {_JSON: {"schema": s.readiness()}},
        }
    }
    return {
        "/metrics": {"get": _op("Prometheus metrics", _ok({"type": "string"}, media="text/plain"), None)},
        "/healthz": {"get": _op("Alive", _ok({"type": "object"}), None)},
        "/readyz": {
            "get": _op(
                "Ready: Redis answers, and some model has a healthy endpoint (or discovered pools)",
                {**_ok(s.readiness(), "Ready"), **not_ready},
                None,
            )
        },
        "/openapi.json": {"get": _op("This document", _ok({"type": "object"}), None)},
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
        "paths": {**_openai_paths(), **_anthropic_paths(), **_admin_paths(), **_operations_paths()},
        "components": {
            "schemas": {"Error": s.error(), "AnthropicError": s.anthropic_error()},
            "parameters": {
                "RequestId": {
                    "name": "x-request-id",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string"},
                    "description": "Your own id, echoed back: up to 128 of A-Za-z0-9._:- (else ignored).",
                }
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
        return Response(body, media_type=_JSON)

    return Route("/openapi.json", openapi_json, methods=["GET"])


__all__ = ["document", "route"]
