"""The admin API under /admin/v1: teams, keys, usage and the audit log.

Every route goes through gateway/admin/guard.py (who is calling, and whether any of their roles
could allow the route's action); a handler that acts on one team checks that team itself with
Caller.require, and a listing shows only the teams the caller may see. A key the caller may not
even read is a 404, as if it did not exist: its id tells nothing about another team.
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.admin import audit
from gateway.admin.access import Caller
from gateway.admin.bounds import within_team
from gateway.admin.deps import AdminDeps
from gateway.admin.guard import journal, json_body, json_response, route
from gateway.admin.validation import expiry, limit_changes, model_names, query_date, team_name
from gateway.errors import ErrorCode, GatewayError
from gateway.identity.roles import Action
from gateway.keys.store import KEEP, KeyNotFoundError, KeyRecord, TeamNotFoundError
from gateway.limits.spec import LimitSet, parse_limits
from gateway.metering import money_budgets, usage_report


def _canonical(deps: AdminDeps) -> dict[str, str]:
    """Each name and alias the router serves now -> its model's name. A key or limit for any
    other is a typo; one given by alias is stored by name, which is what requests are checked by."""
    return {
        name: route.model.name
        for route in deps.router.models()
        for name in (route.model.name, *route.model.aliases)
    }


def _models(value: Any, deps: AdminDeps) -> list[str] | None:
    names = _canonical(deps)
    checked = model_names(value, "models", names)
    return None if checked is None else list(dict.fromkeys(names[m] for m in checked))


def _checked_model_limits(limits: LimitSet, deps: AdminDeps) -> LimitSet:
    if not limits.per_model:
        return limits
    names = _canonical(deps)
    model_names(sorted(limits.per_model), "model_limits", names)
    return replace(limits, per_model={names[m]: own for m, own in limits.per_model.items()})


async def create_team(request: Request, deps: AdminDeps) -> Response:
    body = await json_body(request)
    name = team_name(body.get("name"), "name")
    limits = _checked_model_limits(parse_limits(body, budgets=True), deps)
    team = await deps.keystore.create_team(name, limits, journal=journal(request, deps))
    return json_response(team, 201)


async def get_team(request: Request, deps: AdminDeps) -> Response:
    name = team_name(request.path_params["team"], "team")
    Caller.of(request.scope).require(Action.READ_TEAM, name)
    team = await deps.keystore.team(name)
    keys = await deps.keystore.list_keys(str(team["name"]))
    now = time.time()
    active = sum(1 for k in keys if k.refusal(now) is None)
    return json_response({**team, "keys": len(keys), "active_keys": active})


async def update_team(request: Request, deps: AdminDeps) -> Response:
    name = team_name(request.path_params["team"], "team")
    changes, cleared = limit_changes(await json_body(request), budgets=True)
    changes = _checked_model_limits(changes, deps)
    limits = await deps.keys.update_team(name, changes, cleared, journal=journal(request, deps))
    return json_response({"name": name, "limits": limits.as_dict()})


async def delete_team(request: Request, deps: AdminDeps) -> Response:
    name = team_name(request.path_params["team"], "team")
    revoked = await deps.keys.delete_team(name, journal=journal(request, deps))
    return json_response({"name": name, "deleted": True, "revoked_keys": revoked})


async def update_key(request: Request, deps: AdminDeps) -> Response:
    key_id = request.path_params["key_id"]
    team = await _key_team(request, deps, key_id, Action.MANAGE_KEYS)
    body = await json_body(request)
    changes, cleared = limit_changes(body, budgets=False)
    changes = _checked_model_limits(changes, deps)
    await _within_team(request, deps, changes, team)
    # Present and null means "every model" / "never expires"; absent means unchanged.
    models = _models(body["models"], deps) if "models" in body else KEEP
    expires_at = expiry(body["expires_at"]) if "expires_at" in body else KEEP
    record = await deps.keystore.update_key(
        key_id, changes, cleared, models=models, expires_at=expires_at, journal=journal(request, deps)
    )
    return json_response(record.public())


async def list_teams(request: Request, deps: AdminDeps) -> Response:
    visible = Caller.of(request.scope).teams(Action.READ_TEAM)
    teams = [t for t in await deps.keystore.teams() if visible is None or t["name"] in visible]
    return json_response({"object": "list", "data": teams})


async def create_key(request: Request, deps: AdminDeps) -> Response:
    body = await json_body(request)
    team = team_name(body.get("team"))
    caller = Caller.of(request.scope)
    caller.require(Action.MANAGE_KEYS, team)
    name = body.get("name", "")
    if not isinstance(name, str) or len(name) > 200:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            "'name' must be a string of at most 200 characters.",
            param="name",
        )
    models = _models(body.get("models"), deps)
    limits = _checked_model_limits(parse_limits(body, budgets=False), deps)
    await _within_team(request, deps, limits, team)
    expires_at = expiry(body.get("expires_at"))
    record, secret = await deps.keystore.create_key(
        team,
        name=name,
        models=models,
        limits=limits,
        expires_at=expires_at,
        journal=journal(request, deps),
        created_by=caller.principal.actor(),
    )
    return json_response({**record.public(), "key": secret}, 201)


async def get_key(request: Request, deps: AdminDeps) -> Response:
    record = await deps.keystore.key(request.path_params["key_id"])
    _may_see(request, record.id, record.team, Action.READ_KEYS)
    return json_response(record.public())


async def _key_team(request: Request, deps: AdminDeps, key_id: str, action: Action) -> str:
    """The team of the key a call is about, once the caller may do `action` on it."""
    record = await deps.keystore.key(key_id)
    _may_see(request, record.id, record.team, action)
    return record.team


def _may_see(request: Request, key_id: str, team: str, action: Action) -> None:
    """A key of a team the caller may not read does not exist for them (404); one they may read
    but not change is a 403 naming the role needed."""
    caller = Caller.of(request.scope)
    if not caller.permissions.allows(Action.READ_KEYS, team):
        raise KeyNotFoundError(key_id)
    caller.require(action, team)


async def _within_team(request: Request, deps: AdminDeps, limits: LimitSet, team: str) -> None:
    if Caller.of(request.scope).permissions.platform_admin:
        return
    info = await deps.keystore.team_info(team)
    if info is None:
        raise TeamNotFoundError(team)
    within_team(limits, info.limits, team)


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"'{name}' must be true or false.", param=name)
    return value in ("true", "1")


async def list_keys(request: Request, deps: AdminDeps) -> Response:
    """Every key, or with `team` one team's; with `active=true` only keys that work now."""
    team = request.query_params.get("team")
    caller = Caller.of(request.scope)
    keys: list[KeyRecord]
    if team is None:
        visible = caller.teams(Action.READ_KEYS)
        if visible is None:
            keys = await deps.keystore.list_all_keys()
        else:  # only the caller's teams are read, not every key to throw most away
            mine = [k for team in visible for k in await deps.keystore.list_keys(team)]
            keys = sorted(mine, key=lambda k: (k.team, k.created_at))
    else:
        caller.require(Action.READ_KEYS, team_name(team))
        if not await deps.keystore.team_exists(team_name(team)):
            raise TeamNotFoundError(team)
        keys = await deps.keystore.list_keys(team)
    if _flag(request, "active"):
        now = time.time()
        keys = [k for k in keys if k.refusal(now) is None]
    return json_response({"object": "list", "data": [k.public() for k in keys]})


async def revoke_key(request: Request, deps: AdminDeps) -> Response:
    key_id = request.path_params["key_id"]
    await _key_team(request, deps, key_id, Action.MANAGE_KEYS)
    record = await deps.keys.revoke(key_id, journal=journal(request, deps))
    return json_response(record.public())


async def rotate_key(request: Request, deps: AdminDeps) -> Response:
    key_id = request.path_params["key_id"]
    await _key_team(request, deps, key_id, Action.MANAGE_KEYS)
    grace = (await json_body(request)).get("grace_seconds", 0)
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace <= 90 * 86400:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            "'grace_seconds' must be a number of seconds from 0 to 90 days.",
            param="grace_seconds",
        )
    record, secret = await deps.keystore.rotate(key_id, float(grace), journal=journal(request, deps))
    return json_response({**record.public(), "key": secret})


async def usage(request: Request, deps: AdminDeps) -> Response:
    """Rows per team, key, model, api and day (or grouped by one of them with `group_by`), with
    their totals; `format=csv` gives the same columns as CSV (gateway/metering/usage_report.py)."""
    query = request.query_params
    team = query.get("team")
    since = query_date(request.query_params.get("since"), "since")
    until = query_date(request.query_params.get("until"), "until")
    if since is not None and until is not None and since > until:
        raise GatewayError(ErrorCode.INVALID_REQUEST, "'since' is after 'until'.", param="since")
    group_by = query.get("group_by")
    if group_by is not None and group_by not in usage_report.GROUP_BYS:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            f"'group_by' must be one of {', '.join(usage_report.GROUP_BYS)}.",
            param="group_by",
        )
    output = "csv" if query.get("format") == "csv" else "json"
    caller = Caller.of(request.scope)
    if team:
        caller.require(Action.READ_USAGE, team_name(team))
        teams = [team_name(team)]
    else:
        visible = caller.teams(Action.READ_USAGE)
        teams = [t for t in await deps.keystore.list_teams() if visible is None or t in visible]
    rows = await deps.meter.report(teams, since, until)
    # `api` is a row's client API (chat, messages, …); rows written before usage had it show null.
    for name, column in (("key", "key_id"), ("model", "model"), ("api", "api")):
        wanted = query.get(name)
        if wanted:
            rows = [r for r in rows if r[column] == wanted]
    # Each raw row priced by its own model first: a grouped row mixes models.
    rows = usage_report.priced(rows, usage_report.model_prices(r.model for r in deps.router.models()))
    rows = usage_report.group(rows, group_by) if group_by else [usage_report.ordered(r) for r in rows]
    if output == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=usage_report.COLUMNS)
        writer.writeheader()
        writer.writerows({k: usage_report.csv_cell(v) for k, v in row.items()} for row in rows)
        return Response(out.getvalue(), media_type="text/csv")
    body: dict[str, object] = {
        "object": "list",
        "columns": usage_report.COLUMNS,
        "data": rows,
        "totals": usage_report.totals(rows),
    }
    if team:
        body["budgets"] = await money_budgets.for_team(
            deps.keystore, deps.meter, deps.router, team_name(team)
        )
    return json_response(body)


async def audit_log(request: Request, deps: AdminDeps) -> Response:
    """Newest first; `before` (the last id of a page) pages on. A team that never existed has
    no entries, not a 404: entries outlive what they describe."""
    query = request.query_params
    team = query.get("team")
    caller = Caller.of(request.scope)
    teams = caller.teams(Action.READ_AUDIT)
    if team:
        caller.require(Action.READ_AUDIT, team_name(team))
        teams = frozenset({team_name(team)})
    elif teams is not None and not teams:
        # No team's audit to read (a viewer): refused, not a scan of the whole stream for nothing.
        caller.require(Action.READ_AUDIT, None)
    entries, more = await deps.audit.entries(
        teams=teams,
        since_ms=audit.parse_since(query.get("since")),
        before=audit.parse_before(query.get("before")),
        limit=audit.parse_limit(query.get("limit")),
    )
    return json_response({"object": "list", "data": entries, "has_more": more})


def admin_routes() -> list[Route]:
    return [
        route(
            "/admin/v1/teams",
            {"POST": (create_team, Action.ADMINISTER), "GET": (list_teams, Action.READ_TEAM)},
        ),
        route(
            "/admin/v1/teams/{team}",
            {
                "GET": (get_team, Action.READ_TEAM),
                "PATCH": (update_team, Action.ADMINISTER),
                "DELETE": (delete_team, Action.ADMINISTER),
            },
        ),
        route(
            "/admin/v1/keys", {"POST": (create_key, Action.MANAGE_KEYS), "GET": (list_keys, Action.READ_KEYS)}
        ),
        route(
            "/admin/v1/keys/{key_id}",
            {
                "GET": (get_key, Action.READ_KEYS),
                "DELETE": (revoke_key, Action.MANAGE_KEYS),
                "PATCH": (update_key, Action.MANAGE_KEYS),
            },
        ),
        route("/admin/v1/keys/{key_id}/rotate", {"POST": (rotate_key, Action.MANAGE_KEYS)}),
        route("/admin/v1/usage", {"GET": (usage, Action.READ_USAGE)}),
        route("/admin/v1/audit", {"GET": (audit_log, Action.READ_AUDIT)}),
    ]
