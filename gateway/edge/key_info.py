"""`GET /v1/key/info`: a key looks at itself. Authenticated like any API call, but never admitted:
reading what is left must not spend any of it (gateway/limits/peek.py reads with a no-writes
script). It shows the key's own fields and limits, its team's limits, what remains of each right
now, and the key's usage today and this month; never the secret or its hash, nothing of another
key's or team's."""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.edge.openapi_schemas import nullable
from gateway.errors import ErrorCode, GatewayError, StoreUnavailable
from gateway.http.context import RequestContext
from gateway.limits import admission, plans
from gateway.limits.peek import LimitReader, Remaining
from gateway.metering import usage_report
from gateway.metering.meter import Meter
from gateway.pricing import amount, from_nano
from gateway.state import app_state

# The `api` of this endpoint in metrics and the access log: a constant, like a dialect's name.
KEY_INFO_API = "key_info"


@dataclass(frozen=True, slots=True)
class KeyInfoDeps:
    """Built once in the app's lifespan."""

    limits: LimitReader
    meter: Meter
    timeout_s: float  # one Redis call's bound: the usage report makes a few


def _shown(state: Remaining) -> dict[str, object]:
    limit = state.limit
    out: dict[str, object] = {"limit": limit.amount, "remaining": state.remaining}
    if limit.kind is admission.LimitKind.CONCURRENCY:
        out["in_use"] = state.in_use
    elif limit.kind is admission.LimitKind.BUDGET:
        out["used"] = state.in_use
        out["resets_in_s"] = round(state.reset_after_s, 3)
    elif limit.kind is admission.LimitKind.MONEY:
        # Nano-units inside; the exact decimal strings of the admin API outside.
        out["limit"] = amount(from_nano(limit.amount))
        out["remaining"] = amount(from_nano(state.remaining))
        out["used"] = amount(from_nano(state.in_use))
        out["resets_in_s"] = round(state.reset_after_s, 3)
    else:
        # Until the limit is whole again: a GCRA limit refills steadily, not at a minute's edge.
        out["full_in_s"] = round(state.reset_after_s, 3)
    return out


def _remaining(states: list[Remaining]) -> dict[str, dict[str, object]]:
    """{"key": {...}, "team": {...}}, each {name: state, "models": {model: {name: state}}}."""
    out: dict[str, dict[str, object]] = {"key": {}, "team": {}}
    for state in states:
        whose = out[state.limit.scope]
        if state.limit.model is None:
            whose[state.limit.name] = _shown(state)
        else:
            models = whose.setdefault("models", {})
            assert isinstance(models, dict)
            models.setdefault(state.limit.model, {})[state.limit.name] = _shown(state)
    return out


async def key_info(request: Request) -> Response:
    ctx = RequestContext.of(request.scope)
    ctx.api = KEY_INFO_API
    state = app_state(request.scope)
    deps = state["key_info"]
    principal = await state["gate"].caller(request, ctx)  # no model: nothing else to check
    key, team_limits = principal.key, principal.team_limits
    now = dt.datetime.now(dt.UTC)
    # Every limit a request would meet: no model first (the key's, the team's, the budgets), then
    # what each named model adds.
    limits = plans.plan(key.team, team_limits, key.id, key.limits, "", now)
    for model in sorted({*key.limits.per_model, *team_limits.per_model}):
        planned = plans.plan(key.team, team_limits, key.id, key.limits, model, now)
        limits += [limit for limit in planned if limit.model is not None]
    today = now.date()
    # The report first: it writes this replica's pending usage, which settles what its finished
    # requests reserved, so the remaining values below are the settled ones.
    try:
        async with asyncio.timeout(4 * deps.timeout_s):
            report = await deps.meter.report([key.team], today.replace(day=1), today)
    except (StoreUnavailable, TimeoutError):
        raise GatewayError(ErrorCode.REDIS_UNAVAILABLE, "Redis is unavailable; try again shortly.") from None
    rows = [r for r in report if r["key_id"] == key.id]
    states = await deps.limits.remaining(limits)
    body = {
        "object": "key_info",
        "id": key.id,
        "name": key.name,
        "team": key.team,
        "models": sorted(key.models) if key.models is not None else None,
        "created_at": key.created_at,
        "expires_at": key.expires_at,
        "limits": {"key": key.limits.as_dict(), "team": team_limits.as_dict()},
        "remaining": _remaining(states),
        "usage": {
            "today": _usage([r for r in rows if r["day"] == today.isoformat()]),
            "this_month": _usage(rows),
        },
    }
    return Response(orjson.dumps(body), media_type="application/json")


def _usage(rows: list[dict[str, object]]) -> dict[str, object]:
    total = usage_report.totals(rows)
    return {name: total[name] for name in usage_report.COUNTERS}


def schema() -> dict[str, Any]:
    """The answer's OpenAPI schema (gateway/edge/openapi.py), next to what it describes."""
    counters = {"type": "object", "additionalProperties": {"type": "integer"}}
    return {
        "type": "object",
        "required": ["object", "id", "team", "models", "expires_at", "limits", "remaining", "usage"],
        "properties": {
            "object": {"const": "key_info"},
            "id": {"type": "string"},
            "name": {"type": "string"},
            "team": {"type": "string"},
            "models": nullable({"type": "array", "items": {"type": "string"}}),
            "created_at": {"type": "number"},
            "expires_at": nullable({"type": "number"}),
            "limits": {
                "type": "object",
                "properties": {"key": {"type": "object"}, "team": {"type": "object"}},
            },
            "remaining": {
                "type": "object",
                "description": "Per whose limit (key, team), per limit name (and per model under "
                "`models`): limit, remaining, and in_use (concurrency), used and resets_in_s "
                "(budgets) or full_in_s (per-minute limits); money budgets (daily_cost, "
                "monthly_cost) give limit, remaining and used as decimal strings of the currency.",
                "properties": {"key": {"type": "object"}, "team": {"type": "object"}},
            },
            "usage": {
                "type": "object",
                "properties": {"today": counters, "this_month": counters},
            },
        },
    }
