"""The admin API's view of batches (the CLI's `sluicegate batches`, the console's page): a team's
batches with their progress, one batch, and a cancel. Answers 404 naming SLUICEGATE_FILES_URL
when the Files and Batch API is off."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.admin.access import Caller
from gateway.admin.deps import AdminDeps
from gateway.admin.guard import journal, json_response, route
from gateway.admin.validation import team_name
from gateway.batch.records import FINAL
from gateway.batch.service import BatchService
from gateway.errors import ErrorCode, GatewayError
from gateway.identity.roles import Action
from gateway.state import app_state

MAX_LISTED = 100


def _service(request: Request) -> BatchService:
    service = app_state(request.scope)["batch"]
    if service is None:
        raise GatewayError(
            ErrorCode.NOT_FOUND,
            "The Files and Batch API is off on this gateway: SLUICEGATE_FILES_URL is not set.",
        )
    return service


def _team(request: Request, action: Action) -> str:
    raw = request.query_params.get("team")
    if not raw:
        raise GatewayError(ErrorCode.INVALID_REQUEST, "Name the team: ?team=<name>.", param="team")
    team = team_name(raw, "team")
    Caller.of(request.scope).require(action, team)
    return team


async def list_batches(request: Request, deps: AdminDeps) -> Response:
    team = _team(request, Action.READ_TEAM)
    service = _service(request)
    info = await deps.keystore.team_info(team)
    if info is None:
        raise GatewayError(ErrorCode.TEAM_NOT_FOUND, f"No team named '{team}'.", param="team")
    batches, more = await service.batches.page(team, info.id, after=None, limit=MAX_LISTED)
    return json_response(
        {
            "data": [{**b.public(), "team": team} for b in batches],
            "has_more": more,
            "queued_lines": await service.batches.queued(team),
            "running_lines": await service.batches.running(team),
        }
    )


async def _batch(
    request: Request, deps: AdminDeps, action: Action
) -> tuple[BatchService, str, dict[str, object]]:
    team = _team(request, action)
    service = _service(request)
    batch_id = request.path_params["batch_id"]
    info = await deps.keystore.team_info(team)
    # By the team's id: a team deleted and re-created under its name does not own the old batches.
    batch = None if info is None else await service.batches.get(team, batch_id, info.id)
    if batch is None:
        raise GatewayError(ErrorCode.NOT_FOUND, "No such batch in this team.", param="batch_id")
    return service, team, batch.public()


async def get_batch(request: Request, deps: AdminDeps) -> Response:
    _, team, batch = await _batch(request, deps, Action.READ_TEAM)
    return json_response({**batch, "team": team})


async def cancel_batch(request: Request, deps: AdminDeps) -> Response:
    service, team, batch = await _batch(request, deps, Action.MANAGE_KEYS)
    if batch["status"] in FINAL or batch["status"] == "finalizing":
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            f"Cannot cancel a batch with status {batch['status']}.",
            param="batch_id",
        )
    await service.batches.stop(team, str(batch["id"]), "cancelling")
    service.engine.wake()
    await journal(request, deps).write(
        "batch.cancelled", team=team, before={"status": batch["status"]}, after={"status": "cancelling"}
    )
    again = await service.batches.get(team, str(batch["id"]))
    return json_response({**(batch if again is None else again.public()), "team": team})


def batch_routes() -> list[Route]:
    return [
        route("/admin/v1/batches", {"GET": (list_batches, Action.READ_TEAM)}),
        route("/admin/v1/batches/{batch_id}", {"GET": (get_batch, Action.READ_TEAM)}),
        route("/admin/v1/batches/{batch_id}/cancel", {"POST": (cancel_batch, Action.MANAGE_KEYS)}),
    ]
