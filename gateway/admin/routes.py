"""The admin API under /admin/v1, guarded by SLUICEGATE_ADMIN_TOKEN (compared in constant time)."""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import hmac
import io
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.admin.deps import AdminDeps
from gateway.config import MODEL_NAME_RE
from gateway.errors import ErrorCode, GatewayError
from gateway.keys.auth import bearer_token
from gateway.keys.store import TEAM_NAME_RE, TeamNotFoundError
from gateway.limits.spec import LimitSet, parse_limits
from gateway.proxy.pipeline import read_body

_ADMIN_BODY_LIMIT = 64 * 1024
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
        given = bearer_token(request.headers) or ""
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise GatewayError(ErrorCode.ADMIN_UNAUTHORIZED, "Missing or wrong admin token.")
        try:
            # Admin calls make a few Redis round trips; bound them together.
            async with asyncio.timeout(4 * deps.settings.redis_timeout_s):
                return await handler(request, deps)
        except (RedisError, TimeoutError):
            raise GatewayError(
                ErrorCode.REDIS_UNAVAILABLE, "Redis is unavailable; try again shortly."
            ) from None

    return endpoint


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await read_body(request, _ADMIN_BODY_LIMIT)
    try:
        body = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError:
        raise GatewayError(ErrorCode.INVALID_JSON, "The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise GatewayError(ErrorCode.INVALID_REQUEST, "The request body must be a JSON object.")
    return body


def _team_name(value: Any, param: str = "team") -> str:
    if not isinstance(value, str) or not TEAM_NAME_RE.match(value):
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            f"'{param}' must be 1-63 characters of lowercase letters, digits, '-' and '_', "
            "starting with a letter or digit.",
            param=param,
        )
    return value


async def create_team(request: Request, deps: AdminDeps) -> Response:
    body = await _json_body(request)
    name = _team_name(body.get("name"), "name")
    team = await deps.keystore.create_team(name, parse_limits(body, budgets=True))
    return _json(team, 201)


def _changes(body: dict[str, Any], *, budgets: bool) -> tuple[LimitSet, set[str]]:
    """New limit values, and the names to remove: `{"clear": ["tpm", ...]}`."""
    cleared = body.get("clear", [])
    if not isinstance(cleared, list) or not all(isinstance(c, str) for c in cleared):
        raise GatewayError(ErrorCode.INVALID_REQUEST, "'clear' must be a list of limit names.", param="clear")
    return parse_limits(body, budgets=budgets), set(cleared)


async def update_team(request: Request, deps: AdminDeps) -> Response:
    name = _team_name(request.path_params["team"], "team")
    changes, cleared = _changes(await _json_body(request), budgets=True)
    limits = await deps.keystore.update_team(name, changes, cleared)
    deps.auth.forget(f"team:{name}")
    return _json({"name": name, "limits": limits.as_dict()})


async def update_key(request: Request, deps: AdminDeps) -> Response:
    key_id = request.path_params["key_id"]
    changes, cleared = _changes(await _json_body(request), budgets=False)
    record = await deps.keystore.update_key(key_id, changes, cleared)
    return _json(record.public())


async def list_teams(request: Request, deps: AdminDeps) -> Response:
    return _json({"object": "list", "data": [{"name": t} for t in await deps.keystore.list_teams()]})


async def create_key(request: Request, deps: AdminDeps) -> Response:
    body = await _json_body(request)
    team = _team_name(body.get("team"))
    name = body.get("name", "")
    if not isinstance(name, str) or len(name) > 200:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            "'name' must be a string of at most 200 characters.",
            param="name",
        )
    models = body.get("models")
    if models is not None and (
        not isinstance(models, list)
        or not models
        or not all(isinstance(m, str) and MODEL_NAME_RE.match(m) for m in models)
    ):
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            "'models' must be a non-empty list of model names.",
            param="models",
        )
    limits = parse_limits(body, budgets=False)
    expires_at = _expiry(body.get("expires_at"))
    record, secret = await deps.keystore.create_key(
        team, name=name, models=models, limits=limits, expires_at=expires_at
    )
    return _json({**record.public(), "key": secret}, 201)


def _expiry(value: Any) -> float | None:
    """`expires_at`: Unix seconds, or an ISO 8601 date or time (UTC unless it says otherwise)."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    if isinstance(value, str):
        try:
            when = dt.datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()
    raise GatewayError(
        ErrorCode.INVALID_REQUEST,
        "'expires_at' must be Unix seconds or an ISO 8601 date/time such as 2026-12-31T00:00:00Z.",
        param="expires_at",
    )


async def list_keys(request: Request, deps: AdminDeps) -> Response:
    team = _team_name(request.query_params.get("team"))
    if not await deps.keystore.team_exists(team):
        raise TeamNotFoundError(team)
    keys = await deps.keystore.list_keys(team)
    return _json({"object": "list", "data": [k.public() for k in keys]})


async def revoke_key(request: Request, deps: AdminDeps) -> Response:
    key_id = request.path_params["key_id"]
    record, hashes = await deps.keystore.revoke(key_id)
    for secret_hash in hashes:
        deps.auth.forget(secret_hash)
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
    record, secret = await deps.keystore.rotate(key_id, float(grace))
    return _json({**record.public(), "key": secret})


def _date(request: Request, name: str) -> dt.date | None:
    value = request.query_params.get(name)
    if not value:
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST, f"'{name}' must be a date as YYYY-MM-DD.", param=name
        ) from None


async def usage(request: Request, deps: AdminDeps) -> Response:
    team = request.query_params.get("team")
    teams = [_team_name(team)] if team else await deps.keystore.list_teams()
    rows = await deps.meter.report(teams, _date(request, "since"), _date(request, "until"))
    for name in ("key", "model"):
        wanted = request.query_params.get(name)
        if wanted:
            rows = [r for r in rows if r["key_id" if name == "key" else "model"] == wanted]
    if request.query_params.get("format") == "csv":
        out = io.StringIO()
        if rows:
            writer = csv.DictWriter(out, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        return Response(out.getvalue(), media_type="text/csv")
    return _json({"object": "list", "data": rows})


def admin_routes() -> list[Route]:
    return [
        Route("/admin/v1/teams", guarded(create_team), methods=["POST"]),
        Route("/admin/v1/teams", guarded(list_teams), methods=["GET"]),
        Route("/admin/v1/teams/{team}", guarded(update_team), methods=["PATCH"]),
        Route("/admin/v1/keys", guarded(create_key), methods=["POST"]),
        Route("/admin/v1/keys", guarded(list_keys), methods=["GET"]),
        Route("/admin/v1/keys/{key_id}", guarded(revoke_key), methods=["DELETE"]),
        Route("/admin/v1/keys/{key_id}", guarded(update_key), methods=["PATCH"]),
        Route("/admin/v1/keys/{key_id}/rotate", guarded(rotate_key), methods=["POST"]),
        Route("/admin/v1/usage", guarded(usage), methods=["GET"]),
    ]
