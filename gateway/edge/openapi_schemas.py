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

Schema = dict[str, Any]

MAX_GRACE_S = 90 * 86400  # gateway.admin.routes.rotate_key


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def int_field(minimum: int, description: str = "", *, maximum: int = MAX_LIMIT) -> Schema:
    schema: Schema = {"type": "integer", "minimum": minimum, "maximum": maximum}
    if description:
        schema["description"] = description
    return nullable(schema)


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
        "rpm": int_field(1, "Requests per minute."),
        "tpm": int_field(1, "Tokens per minute."),
        "max_concurrency": int_field(1, "Requests in flight."),
        "tpm_counts": {"enum": list(TOKEN_COUNTS), "description": "Which tokens `tpm` counts."},
    }
    if budgets:
        properties["daily_tokens"] = int_field(1, "Token budget per UTC calendar day.")
        properties["monthly_tokens"] = int_field(1, "Token budget per UTC calendar month.")
        for name, period in (("daily_cost", "day"), ("monthly_cost", "month")):
            properties[name] = nullable(
                {
                    "type": "string",
                    "pattern": r"^\s*[0-9]{1,16}(\.[0-9]{1,9})?\s*$",
                    "description": f"Money budget per UTC calendar {period}, in the model table's "
                    "currency: an exact decimal string, more than 0, at most 9 decimal places.",
                }
            )
    if budgets if weight is None else weight:
        properties["weight"] = int_field(1, "The team's share of a saturated pool's queue (default 1).")
    if per_model:
        properties["priority"] = int_field(
            1, "Band in a saturated pool, 1 (lowest) to 9 (default 5); served first when higher.", maximum=9
        )
        properties["default_deadline_ms"] = int_field(
            1,
            "Milliseconds a request without `x-sluicegate-deadline-ms` may wait for its first token "
            "(a key's overrides its team's); one that cannot get it in time is refused at once.",
            maximum=86_400_000,
        )
        properties["overflow"] = nullable(
            {
                "type": "string",
                "enum": ["allowed", "denied"],
                "description": "Whether requests may be served by a model's external overflow "
                "provider (docs/overflow.md): denied unless the team allows it; a key may deny it.",
            }
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
            "created_by": nullable(actor()),
            "key": {"type": "string", "description": "The secret: only on creation and rotation."},
        },
    }


def actor() -> Schema:
    """gateway.identity.principal.Principal.actor: who made a change."""
    return {
        "type": "object",
        "required": ["kind"],
        "description": "person (sub, email, name, issuer), service (client_id, issuer), token "
        "(the break-glass admin token), scim (the identity provider's provisioning) or system; null "
        "before actors were recorded.",
        "properties": {
            "kind": {"enum": ["person", "service", "token", "scim", "system", "anonymous"]},
            "sub": nullable({"type": "string"}),
            "email": nullable({"type": "string"}),
            "name": nullable({"type": "string"}),
            "issuer": nullable({"type": "string"}),
            "client_id": nullable({"type": "string"}),
        },
    }


def role_binding() -> Schema:
    """gateway.identity.bindings.RoleBinding.public."""
    return {
        "type": "object",
        "required": ["id", "role", "team", "active", "created_at", "created_by"],
        "properties": {
            "id": {"type": "string"},
            "group": {"type": "string", "description": "A value of the IdP's groups claim, exactly."},
            "user": {"type": "string", "description": "A subject, or a verified email (any case)."},
            "role": {"enum": ["platform-admin", "team-admin", "team-viewer", "auditor"]},
            "team": nullable({"type": "string"}),
            "active": {
                "type": "boolean",
                "description": "False once its team was deleted (and maybe re-created): it grants nothing.",
            },
            "created_at": {"type": "number"},
            "created_by": actor(),
        },
    }


def role_binding_create() -> Schema:
    return {
        "type": "object",
        "required": ["role"],
        "properties": {
            "group": {"type": "string", "maxLength": 256},
            "user": {"type": "string", "maxLength": 256},
            "role": {"enum": ["platform-admin", "team-admin", "team-viewer", "auditor"]},
            "team": {"type": "string", "description": "Required for team-admin and team-viewer only."},
        },
    }


def listing(item: Schema) -> Schema:
    return {
        "type": "object",
        "required": ["object", "data"],
        "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": item}},
    }


def pools_listing() -> Schema:
    """gateway.admin.models: the pool state of the replica that answered, which it names."""
    schema = listing({"type": "object"})
    schema["required"] = [*schema["required"], "replica"]
    schema["properties"]["replica"] = {
        "type": "string",
        "description": "The answering replica's host name (its pod's name in Kubernetes): in-flight "
        "counts, health and queues are per replica.",
    }
    return schema


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
            "actor": nullable(actor()),
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
