"""The admin API under /admin/v1, guarded by SLUICEGATE_ADMIN_TOKEN (compared in constant time)."""

from __future__ import annotations

import asyncio
import csv
import hashlib
import hmac
import io
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import orjson
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive

from gateway.admin import audit
from gateway.admin.deps import AdminDeps
from gateway.admin.validation import expiry, limit_changes, model_names, query_date, team_name
from gateway.errors import ErrorCode, GatewayError
from gateway.http.body import read_body
from gateway.keys.auth import bearer_token
from gateway.keys.store import KEEP, KeyRecord, TeamNotFoundError
from gateway.limits.spec import LimitSet, parse_limits
from gateway.metering import usage_report
from gateway.observability.logs import loggable

_ADMIN_BODY_LIMIT = 64 * 1024
log = logging.getLogger("sluicegate.admin")
Handler = Callable[[Request, AdminDeps], Awaitable[Response]]


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def guarded(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        deps = AdminDeps.of(request.scope)
        expected = deps.settings.admin_token
        if not expected:
            raise GatewayError(
                ErrorCode.ADMIN_DISABLED,
                "The admin API is disabled: start the gateway with SLUICEGATE_ADMIN_TOKEN set.",
            )
        _check_admin_token(request, deps, expected)
        # The body first, bounded by the client's body timeout: a slow client is not a Redis
        # outage. Handlers then read it again from memory.
        body = await read_body(request, _ADMIN_BODY_LIMIT, deps.settings.body_timeout_s)
        request = Request(request.scope, _replay(body, request.receive))
        try:
            # Admin calls make a few Redis round trips; bound them together.
            async with asyncio.timeout(4 * deps.settings.redis_timeout_s):
                return await handler(request, deps)
        except (RedisError, TimeoutError):
            raise GatewayError(
                ErrorCode.REDIS_UNAVAILABLE, "Redis is unavailable; try again shortly."
            ) from None

    return endpoint


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body already read, once; after it, the connection's own messages (a disconnect)."""
    pending = [body]

    async def replay() -> Message:
        if pending:
            return {"type": "http.request", "body": pending.pop(), "more_body": False}
        return await receive()

    return replay


def _check_admin_token(request: Request, deps: AdminDeps, expected: str) -> None:
    """Constant-time comparison, and an address that keeps guessing gets 429 for a while on a
    wrong token. The right token always passes (gateway/admin/throttle.py): whoever shares the
    admin's address must not be able to lock the admin out."""
    given = bearer_token(request.headers) or ""
    # Digests of both, so not even the token's length shows in the comparison's time.
    if hmac.compare_digest(_digest(given), _digest(expected)):
        return
    throttle = deps.throttle
    address = throttle.address(request.scope)
    retry_after = throttle.retry_after(address)
    if retry_after is not None:
        # Neither counted nor logged: a locked-out guesser adds no log noise.
        raise GatewayError(
            ErrorCode.ADMIN_THROTTLED,
            f"Too many wrong admin tokens from this address; try again in {retry_after} s.",
            headers={"retry-after": str(retry_after)},
        )
    throttle.failed(address)
    path = request.url.path
    # Never the presented value: it may be the real token with a typo.
    log.warning(
        "admin token rejected: peer=%s path=%s presented=%s",
        loggable(address or "-"),
        loggable(path),
        "yes" if given else "no",
    )
    raise GatewayError(ErrorCode.ADMIN_UNAUTHORIZED, "Missing or wrong admin token.")


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await read_body(request, _ADMIN_BODY_LIMIT, AdminDeps.of(request.scope).settings.body_timeout_s)
    try:
        body = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError:
        raise GatewayError(ErrorCode.INVALID_JSON, "The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise GatewayError(ErrorCode.INVALID_REQUEST, "The request body must be a JSON object.")
    return body


def _journal(request: Request, deps: AdminDeps) -> audit.PeerJournal:
    """The audit log, for a change this request makes: the address is the one the throttle
    counts (the peer, or behind a trusted proxy the nearest untrusted X-Forwarded-For hop)."""
    return deps.audit.by(deps.throttle.address(request.scope))


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
    body = await _json_body(request)
    name = team_name(body.get("name"), "name")
    limits = _checked_model_limits(parse_limits(body, budgets=True), deps)
    team = await deps.keystore.create_team(name, limits, journal=_journal(request, deps))
    return _json(team, 201)


async def get_team(request: Request, deps: AdminDeps) -> Response:
    team = await deps.keystore.team(team_name(request.path_params["team"], "team"))
    keys = await deps.keystore.list_keys(str(team["name"]))
    now = time.time()
    active = sum(1 for k in keys if k.refusal(now) is None)
    return _json({**team, "keys": len(keys), "active_keys": active})


async def update_team(request: Request, deps: AdminDeps) -> Response:
    name = team_name(request.path_params["team"], "team")
    changes, cleared = limit_changes(await _json_body(request), budgets=True)
    changes = _checked_model_limits(changes, deps)
    limits = await deps.keys.update_team(name, changes, cleared, journal=_journal(request, deps))
    return _json({"name": name, "limits": limits.as_dict()})


async def delete_team(request: Request, deps: AdminDeps) -> Response:
    name = team_name(request.path_params["team"], "team")
    revoked = await deps.keys.delete_team(name, journal=_journal(request, deps))
    return _json({"name": name, "deleted": True, "revoked_keys": revoked})


async def update_key(request: Request, deps: AdminDeps) -> Response:
    key_id = request.path_params["key_id"]
    body = await _json_body(request)
    changes, cleared = limit_changes(body, budgets=False)
    changes = _checked_model_limits(changes, deps)
    # Present and null means "every model" / "never expires"; absent means unchanged.
    models = _models(body["models"], deps) if "models" in body else KEEP
    expires_at = expiry(body["expires_at"]) if "expires_at" in body else KEEP
    record = await deps.keystore.update_key(
        key_id, changes, cleared, models=models, expires_at=expires_at, journal=_journal(request, deps)
    )
    return _json(record.public())


async def list_teams(request: Request, deps: AdminDeps) -> Response:
    return _json({"object": "list", "data": await deps.keystore.teams()})


async def create_key(request: Request, deps: AdminDeps) -> Response:
    body = await _json_body(request)
    team = team_name(body.get("team"))
    name = body.get("name", "")
    if not isinstance(name, str) or len(name) > 200:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            "'name' must be a string of at most 200 characters.",
            param="name",
        )
    models = _models(body.get("models"), deps)
    limits = _checked_model_limits(parse_limits(body, budgets=False), deps)
    expires_at = expiry(body.get("expires_at"))
    record, secret = await deps.keystore.create_key(
        team,
        name=name,
        models=models,
        limits=limits,
        expires_at=expires_at,
        journal=_journal(request, deps),
    )
    return _json({**record.public(), "key": secret}, 201)


async def get_key(request: Request, deps: AdminDeps) -> Response:
    return _json((await deps.keystore.key(request.path_params["key_id"])).public())


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"'{name}' must be true or false.", param=name)
    return value in ("true", "1")


async def list_keys(request: Request, deps: AdminDeps) -> Response:
    """Every key, or with `team` one team's; with `active=true` only keys that work now."""
    team = request.query_params.get("team")
    keys: list[KeyRecord]
    if team is None:
        keys = await deps.keystore.list_all_keys()
    else:
        if not await deps.keystore.team_exists(team_name(team)):
            raise TeamNotFoundError(team)
        keys = await deps.keystore.list_keys(team)
    if _flag(request, "active"):
        now = time.time()
        keys = [k for k in keys if k.refusal(now) is None]
    return _json({"object": "list", "data": [k.public() for k in keys]})


async def revoke_key(request: Request, deps: AdminDeps) -> Response:
    key_id = request.path_params["key_id"]
    record = await deps.keys.revoke(key_id, journal=_journal(request, deps))
    return _json(record.public())


async def rotate_key(request: Request, deps: AdminDeps) -> Response:
    key_id = request.path_params["key_id"]
    grace = (await _json_body(request)).get("grace_seconds", 0)
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace <= 90 * 86400:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            "'grace_seconds' must be a number of seconds from 0 to 90 days.",
            param="grace_seconds",
        )
    record, secret = await deps.keystore.rotate(key_id, float(grace), journal=_journal(request, deps))
    return _json({**record.public(), "key": secret})


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
    teams = [team_name(team)] if team else await deps.keystore.list_teams()
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
    return _json(
        {
            "object": "list",
            "columns": usage_report.COLUMNS,
            "data": rows,
            "totals": usage_report.totals(rows),
        }
    )


async def audit_log(request: Request, deps: AdminDeps) -> Response:
    """Newest first; `before` (the last id of a page) pages on. A team that never existed has
    no entries, not a 404: entries outlive what they describe."""
    query = request.query_params
    team = query.get("team")
    entries, more = await deps.audit.entries(
        team=team_name(team) if team else None,
        since_ms=audit.parse_since(query.get("since")),
        before=audit.parse_before(query.get("before")),
        limit=audit.parse_limit(query.get("limit")),
    )
    return _json({"object": "list", "data": entries, "has_more": more})


def admin_routes() -> list[Route]:
    # One Route per path: Starlette answers a wrong method with 405 from the first Route whose
    # path matches, so split Routes would name only their own methods in `Allow`.
    return [
        _route("/admin/v1/teams", POST=create_team, GET=list_teams),
        _route("/admin/v1/teams/{team}", GET=get_team, PATCH=update_team, DELETE=delete_team),
        _route("/admin/v1/keys", POST=create_key, GET=list_keys),
        _route("/admin/v1/keys/{key_id}", GET=get_key, DELETE=revoke_key, PATCH=update_key),
        _route("/admin/v1/keys/{key_id}/rotate", POST=rotate_key),
        _route("/admin/v1/usage", GET=usage),
        _route("/admin/v1/audit", GET=audit_log),
    ]


def _route(path: str, **handlers: Handler) -> Route:
    guarded_handlers = {method: guarded(handler) for method, handler in handlers.items()}
    if "GET" in guarded_handlers:
        guarded_handlers["HEAD"] = guarded_handlers["GET"]

    async def endpoint(request: Request) -> Response:
        return await guarded_handlers[request.method](request)

    return Route(path, endpoint, methods=list(handlers))
