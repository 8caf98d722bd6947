"""The building blocks of the OpenAPI document (gateway.edge.openapi): operations, their error
responses (described by the codes gateway.errors maps to each status), parameters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import ErrorCode

Schema = dict[str, Any]


def _nothing() -> Schema:
    return {}


@dataclass(frozen=True, slots=True)
class OpenApiPart:
    """What one client API adds to the document (gateway.apis: its `openapi`): its paths, and
    the component schemas and security schemes they refer to. Functions: each call builds a
    fresh tree, as the document's callers may edit it."""

    paths: Callable[[], Schema]
    schemas: Callable[[], Schema] = field(default=_nothing)
    security_schemes: Callable[[], Schema] = field(default=_nothing)


JSON = "application/json"
ANY_4XX = "4XX"  # a worker's refusal keeps its own status
PROXY_ERRORS = (400, 401, 403, 404, 413, 429, 502, 503, 504, ANY_4XX)
# A bad path or query, wrong token, too many wrong tokens, admin API disabled, Redis down.
ADMIN_ERRORS = (400, 401, 403, 429, 503)
# Codes only the admin API answers with, and codes only the OpenAI API does: each operation's
# error descriptions name the codes its own side can produce.
ADMIN_ONLY = ("admin_", "team_", "key_", "forbidden", "idp_")
API_ONLY = (
    "invalid_api_key",
    "model_",
    "rate_limit_exceeded",
    "insufficient_quota",
    "worker_rejected",
    "upstream_",
    "no_healthy_upstream",
    "pool_saturated",
    "queue_timeout",
    "deadline_unreachable",
    "overflow_unavailable",
    "overflow_not_allowed",
)


def response_headers() -> Schema:
    return {
        "x-sluicegate-request-id": {
            "description": "The gateway's own id of this request (its access log, its usage record).",
            "schema": {"type": "string"},
        }
    }


def error_responses(*statuses: int | str, admin: bool = False) -> Schema:
    """Error responses, each described by the codes ErrorCode maps to its status on this side."""
    other_side = API_ONLY if admin else ADMIN_ONLY
    out: Schema = {}
    for status in statuses:
        if status == ANY_4XX:
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
            "headers": response_headers(),
            "content": {JSON: {"schema": {"$ref": "#/components/schemas/Error"}}},
        }
    return out


def ok_response(schema: Schema, description: str = "OK", status: int = 200, media: str = JSON) -> Schema:
    return {
        str(status): {
            "description": description,
            "headers": response_headers(),
            "content": {media: {"schema": schema}},
        }
    }


def security_of(scheme: str | None) -> list[Schema]:
    # An API key may come as a bearer token or, for Anthropic's SDKs, in `x-api-key`: either one.
    if scheme == "apiKey":
        return [{"apiKey": []}, {"apiKeyHeader": []}]
    return [{scheme: []}] if scheme else []


def operation(summary: str, responses: Schema, security: str | None, **extra: Any) -> Schema:
    op: Schema = {
        "summary": summary,
        "security": security_of(security),
        "parameters": [{"$ref": "#/components/parameters/RequestId"}, *extra.pop("parameters", [])],
        "responses": responses,
    }
    if "body" in extra:
        body, required = extra.pop("body"), extra.pop("body_required", True)
        op["requestBody"] = {"required": required, "content": {JSON: {"schema": body}}}
    op.update(extra)
    return op


PRIORITY = [{"$ref": "#/components/parameters/Priority"}, {"$ref": "#/components/parameters/Deadline"}]


def proxy_path(summary: str, body: Schema) -> Schema:
    answer = ok_response(
        {"type": "object"}, "The worker's answer; an SSE stream (text/event-stream) when `stream` is true."
    )
    # Unnamed events (`data:` lines only), read as the default `message` event; `[DONE]` last.
    event = {"type": "object", "required": ["data"], "properties": {"data": {"type": "string"}}}
    answer["200"]["content"]["text/event-stream"] = {"schema": event}
    errors = error_responses(*PROXY_ERRORS)
    return {
        "post": operation(
            summary, {**answer, **errors}, "apiKey", body=body, tags=["openai"], parameters=PRIORITY
        )
    }


def admin_operation(summary: str, ok: Schema, *errors: int, **extra: Any) -> Schema:
    responses = {**ok, **error_responses(*sorted({*ADMIN_ERRORS, *errors}), admin=True)}
    return operation(summary, responses, "adminToken", tags=["admin"], **extra)


def query_param(name: str, schema: Schema, description: str, *, required: bool = False) -> Schema:
    return {"name": name, "in": "query", "required": required, "schema": schema, "description": description}


def path_param(name: str, schema: Schema) -> Schema:
    return {"name": name, "in": "path", "required": True, "schema": schema}
