"""The admin API's part of the OpenAPI document (gateway.edge.openapi)."""

from __future__ import annotations

from gateway.edge import openapi_schemas as s
from gateway.edge.openapi_parts import (
    Schema,
    admin_operation,
    ok_response,
    path_param,
    query_param,
)


def admin_paths() -> Schema:
    key_id = path_param("key_id", {"type": "string"})
    usage_ok = ok_response(s.listing({"type": "object"}), "Rows as JSON, or CSV with `format=csv`.")
    usage_ok["200"]["content"]["text/csv"] = {"schema": {"type": "string"}}
    return {
        "/admin/v1/teams": {
            "get": admin_operation("List teams", ok_response(s.listing({"type": "object"}))),
            "post": admin_operation(
                "Create a team",
                ok_response({"type": "object"}, "Created", 201),
                400,
                409,
                413,
                body=s.team_create(),
            ),
        },
        "/admin/v1/teams/{team}": {
            "get": admin_operation(
                "A team: its limits, when it was created, how many keys it has",
                ok_response({"type": "object"}),
                404,
                parameters=[path_param("team", s.team_name())],
            ),
            "delete": admin_operation(
                "Delete a team: every key of it is revoked at once",
                ok_response({"type": "object"}),
                404,
                parameters=[path_param("team", s.team_name())],
            ),
            "patch": admin_operation(
                "Change a team's limits",
                ok_response({"type": "object"}),
                400,
                404,
                413,
                parameters=[path_param("team", s.team_name())],
                body=s.team_update(),
                body_required=False,
            ),
        },
        "/admin/v1/keys": {
            "get": admin_operation(
                "List keys: every team's, or one team's",
                ok_response(s.listing(s.key_record())),
                400,
                404,
                parameters=[
                    query_param("team", s.team_name(), "Only this team's keys (default: every team's)."),
                    query_param(
                        "active",
                        {"enum": ["true", "false", "1", "0"]},
                        "Only keys that work now (not revoked, not expired).",
                    ),
                ],
            ),
            "post": admin_operation(
                "Create a key (its secret is in the answer, once)",
                ok_response(s.key_record(), "Created", 201),
                400,
                404,
                413,
                body=s.key_create(),
            ),
        },
        "/admin/v1/keys/{key_id}": {
            "get": admin_operation(
                "A key (never its secret)", ok_response(s.key_record()), 404, parameters=[key_id]
            ),
            "delete": admin_operation("Revoke a key", ok_response(s.key_record()), 404, parameters=[key_id]),
            "patch": admin_operation(
                "Change a key's limits, models or expiry (a revoked key cannot change)",
                ok_response(s.key_record()),
                400,
                404,
                409,
                413,
                parameters=[key_id],
                body=s.key_update(),
                body_required=False,
            ),
        },
        "/admin/v1/keys/{key_id}/rotate": {
            "post": admin_operation(
                "Issue a new secret; the old one keeps working for `grace_seconds`",
                ok_response(s.key_record()),
                400,
                404,
                413,
                parameters=[key_id],
                body=s.rotate(),
                body_required=False,
            )
        },
        "/admin/v1/usage": {
            "get": admin_operation(
                "Metered usage per day, team, key, model and client API (`api`; null for usage "
                "recorded before the api was), with the cost of its tokens at the model's configured "
                "`price` (`cost`, an exact decimal string, and `currency`; null for a model without one)",
                usage_ok,
                400,
                404,
                parameters=[
                    query_param("team", s.team_filter(), "Only this team (default: every team)."),
                    query_param("key", {"type": "string"}, "Only this key id."),
                    query_param("model", {"type": "string"}, "Only this model."),
                    query_param(
                        "api",
                        {"type": "string"},
                        "Only this client API (`chat`, `completions`, `embeddings`, `messages`, "
                        "`responses`).",
                    ),
                    query_param("since", s.date(), "First day (UTC), YYYY-MM-DD."),
                    query_param("until", s.date(), "Last day (UTC), YYYY-MM-DD."),
                    query_param(
                        "group_by",
                        {"enum": ["team", "key", "model", "api", "day"]},
                        "One row per team, key, model, client API or day, counters summed.",
                    ),
                    query_param("format", {"type": "string"}, "`csv` for CSV; anything else is JSON."),
                ],
            )
        },
        "/admin/v1/batches": {
            "get": admin_operation(
                "A team's batches (the Files and Batch API), newest first, with its queued and running lines",
                ok_response({"type": "object"}),
                404,
                parameters=[query_param("team", {"type": "string"}, "The team.", required=True)],
            )
        },
        "/admin/v1/batches/{batch_id}": {
            "get": admin_operation(
                "One batch of a team",
                ok_response({"type": "object"}),
                404,
                parameters=[
                    path_param("batch_id", {"type": "string"}),
                    query_param("team", {"type": "string"}, "The team.", required=True),
                ],
            )
        },
        "/admin/v1/batches/{batch_id}/cancel": {
            "post": admin_operation(
                "Cancel a batch: no new line starts, lines in flight finish and are kept",
                ok_response({"type": "object"}),
                404,
                parameters=[
                    path_param("batch_id", {"type": "string"}),
                    query_param("team", {"type": "string"}, "The team.", required=True),
                ],
            )
        },
        "/admin/v1/audit": {
            "get": admin_operation(
                "Admin changes, newest first: action, team, key id, old and new values, address",
                ok_response(s.audit_listing()),
                400,
                parameters=[
                    query_param("team", s.team_filter(), "Only this team's changes (default: every team)."),
                    query_param("since", {"type": "string"}, "Unix seconds or an ISO 8601 date/time (UTC)."),
                    query_param("before", s.audit_before(), "Older than this entry id (the next page)."),
                    query_param("limit", s.audit_limit(), "At most this many entries."),
                ],
            )
        },
        "/admin/v1/role-bindings": {
            "get": admin_operation(
                "Role bindings (platform admins and auditors)",
                ok_response(s.listing(s.role_binding())),
                400,
                parameters=[
                    query_param("team", s.team_filter(), "Only this team's bindings."),
                    query_param(
                        "role",
                        {"enum": ["platform-admin", "team-admin", "team-viewer", "auditor"]},
                        "Only this role's bindings.",
                    ),
                ],
            ),
            "post": admin_operation(
                "Give a role to an IdP group or a user (201; 200 with the existing binding when the same "
                "subject already holds that role on that team)",
                ok_response(s.role_binding(), "Created", 201),
                400,
                413,
                body=s.role_binding_create(),
            ),
        },
        "/admin/v1/role-bindings/{binding_id}": {
            "delete": admin_operation(
                "Remove a role binding: every replica honours it on the next call",
                ok_response(s.role_binding()),
                404,
                parameters=[path_param("binding_id", {"type": "string"})],
            )
        },
        "/admin/v1/me": {
            "get": admin_operation(
                "Who the admin API sees: kind (person, service, token), subject, email, name, issuer, "
                "groups and effective roles (each with what gave it)",
                ok_response({"type": "object"}),
            )
        },
        "/admin/v1/oidc": {
            "get": {
                "summary": "Public: the IdP's issuer, the admin API's audience and the CLI's public client "
                "id, for `sluicegate login` (nulls without OIDC)",
                "tags": ["admin"],
                "security": [],
                "responses": {
                    "200": {
                        "description": "OK",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            }
        },
        "/admin/v1/models": {
            "get": admin_operation(
                "Models, pools and endpoints as this replica sees them",
                ok_response(s.pools_listing()),
            )
        },
    }
