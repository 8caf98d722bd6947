"""The admin API under /admin/v1, guarded by SLUICEGATE_ADMIN_TOKEN (compared in constant time)."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import datetime as dt
import hashlib
import hmac
import io
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive

from gateway.admin import audit
from gateway.admin.deps import AdminDeps
from gateway.config import MODEL_NAME_RE
from gateway.errors import ErrorCode, GatewayError
from gateway.keys.auth import bearer_token
from gateway.keys.store import TEAM_NAME_RE, TeamNotFoundError
from gateway.limits.spec import LimitSet, parse_limits
from gateway.observability.logs import loggable
from gateway.proxy.pipeline import read_body

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
    """Constant-time comparison, and an address that keeps guessing is locked out for a while:
    even the right token gets 429 then, so a lockout tells a guesser nothing."""
    throttle = deps.throttle
    address = throttle.address(request.scope)
    retry_after = throttle.retry_after(address)
    if retry_after is not None:
        raise GatewayError(
            ErrorCode.ADMIN_THROTTLED,
            f"Too many wrong admin tokens from this address; try again in {retry_after} s.",
            headers={"retry-after": str(retry_after)},
        )
    given = bearer_token(request.headers) or ""
    # Digests of both, so not even the token's length shows in the comparison's time.
    if hmac.compare_digest(_digest(given), _digest(expected)):
        throttle.succeeded(address)
        return
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


def _team_name(value: Any, param: str = "team") -> str:
    if not isinstance(value, str) or not TEAM_NAME_RE.fullmatch(value):
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            f"'{param}' must be 1-63 characters of lowercase letters, digits, '-' and '_', "
            "starting with a letter or digit.",
            param=param,
        )
    return value


def _journal(request: Request, deps: AdminDeps) -> audit.PeerJournal:
    """The audit log, for a change this request makes: the address is the one the throttle
    counts (the peer, or behind a trusted proxy the nearest untrusted X-Forwarded-For hop)."""
    return deps.audit.by(deps.throttle.address(request.scope))


async def create_team(request: Request, deps: AdminDeps) -> Response:
    body = await _json_body(request)
    name = _team_name(body.get("name"), "name")
    limits = parse_limits(body, budgets=True)
    team = await deps.keystore.create_team(name, limits, journal=_journal(request, deps))
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
    limits = await deps.keystore.update_team(name, changes, cleared, journal=_journal(request, deps))
    deps.auth.forget(f"team:{name}")
    return _json({"name": name, "limits": limits.as_dict()})


async def update_key(request: Request, deps: AdminDeps) -> Response:
    key_id = request.path_params["key_id"]
    changes, cleared = _changes(await _json_body(request), budgets=False)
    record = await deps.keystore.update_key(key_id, changes, cleared, journal=_journal(request, deps))
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
        or not all(isinstance(m, str) and MODEL_NAME_RE.fullmatch(m) for m in models)
    ):
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            "'models' must be a non-empty list of model names.",
            param="models",
        )
    limits = parse_limits(body, budgets=False)
    expires_at = _expiry(body.get("expires_at"))
    record, secret = await deps.keystore.create_key(
        team,
        name=name,
        models=models,
        limits=limits,
        expires_at=expires_at,
        journal=_journal(request, deps),
    )
    return _json({**record.public(), "key": secret}, 201)


def _expiry(value: Any) -> float | None:
    """`expires_at`: Unix seconds, or an ISO 8601 date or time (UTC unless it says otherwise), in
    the future: a time already past would only make a key that never works."""
    if value is None:
        return None
    when: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        when = float(value)
    elif isinstance(value, str):
        with contextlib.suppress(ValueError, OverflowError):
            parsed = dt.datetime.fromisoformat(value)
            when = (parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)).timestamp()
    if when is None or not math.isfinite(when):
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            "'expires_at' must be Unix seconds or an ISO 8601 date/time such as 2026-12-31T00:00:00Z.",
            param="expires_at",
        )
    if when <= time.time():
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            "'expires_at' is in the past: a key must expire in the future.",
            param="expires_at",
        )
    return when


async def list_keys(request: Request, deps: AdminDeps) -> Response:
    team = _team_name(request.query_params.get("team"))
    if not await deps.keystore.team_exists(team):
        raise TeamNotFoundError(team)
    keys = await deps.keystore.list_keys(team)
    return _json({"object": "list", "data": [k.public() for k in keys]})


async def revoke_key(request: Request, deps: AdminDeps) -> Response:
    key_id = request.path_params["key_id"]
    record, hashes = await deps.keystore.revoke(key_id, journal=_journal(request, deps))
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
    record, secret = await deps.keystore.rotate(key_id, float(grace), journal=_journal(request, deps))
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
    # `api` is a row's client API (chat, messages, …); rows written before usage had it show null.
    for name, column in (("key", "key_id"), ("model", "model"), ("api", "api")):
        wanted = request.query_params.get(name)
        if wanted:
            rows = [r for r in rows if r[column] == wanted]
    if request.query_params.get("format") == "csv":
        out = io.StringIO()
        if rows:
            writer = csv.DictWriter(out, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        return Response(out.getvalue(), media_type="text/csv")
    return _json({"object": "list", "data": rows})


async def audit_log(request: Request, deps: AdminDeps) -> Response:
    """Newest first; `before` (the last id of a page) pages on. A team that never existed has
    no entries, not a 404: entries outlive what they describe."""
    query = request.query_params
    team = query.get("team")
    entries, more = await deps.audit.entries(
        team=_team_name(team) if team else None,
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
        _route("/admin/v1/teams/{team}", PATCH=update_team),
        _route("/admin/v1/keys", POST=create_key, GET=list_keys),
        _route("/admin/v1/keys/{key_id}", DELETE=revoke_key, PATCH=update_key),
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
