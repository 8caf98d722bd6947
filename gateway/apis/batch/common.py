"""What every Files and Batch route does first: the service (or the 404 that names the setting),
the caller (a key the gate accepts, and that may use batches), and the list paging parameters."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from gateway.batch.service import BatchService
from gateway.errors import ErrorCode, GatewayError
from gateway.http.context import RequestContext
from gateway.keys.auth import Principal
from gateway.state import app_state

DEFAULT_PAGE = 20
MAX_PAGE = 100


@dataclass(frozen=True, slots=True)
class Caller:
    service: BatchService
    principal: Principal

    @property
    def team(self) -> str:
        return self.principal.key.team

    @property
    def team_id(self) -> str:
        return self.principal.team_id


async def caller(request: Request, api: str) -> Caller:
    state = app_state(request.scope)
    ctx = RequestContext.of(request.scope)
    ctx.api = api
    service = state["batch"]
    if service is None:
        raise GatewayError(
            ErrorCode.NOT_FOUND,
            "The Files and Batch API is off on this gateway: its operator sets SLUICEGATE_FILES_URL "
            "(file:///path or s3://bucket/prefix) to turn it on.",
        )
    principal = await state["gate"].caller(request, ctx)
    if principal.key.limits.batches is False or principal.team_limits.batches is False:
        raise GatewayError(
            ErrorCode.FORBIDDEN, "This API key may not use the Files and Batch API (batches: false)."
        )
    return Caller(service, principal)


def page_params(request: Request) -> tuple[str | None, int]:
    query = request.query_params
    after = query.get("after") or None
    raw = query.get("limit")
    limit = DEFAULT_PAGE
    if raw is not None:
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
            raise GatewayError(
                ErrorCode.INVALID_REQUEST, f"'limit' must be an integer from 1 to {MAX_PAGE}.", param="limit"
            )
        limit = int(raw)
    return after, limit


def listing(data: list[dict[str, object]], has_more: bool) -> dict[str, object]:
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }
