"""A team's batches (the Files and Batch API, gateway/batch/): each with its status and
progress, and the team's queued and running lines. Read-only: a cancel is the CLI's or the API's."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from gateway.admin import validation
from gateway.console.web import Console, Page
from gateway.errors import ErrorCode, GatewayError
from gateway.identity.roles import Action
from gateway.state import app_state

_LISTED = 100


class Batches:
    def __init__(self, console: Console) -> None:
        self._console = console

    async def index(self, request: Request, page: Page) -> Response:
        team = validation.team_name(request.path_params["team"])
        page.require(Action.READ_TEAM, team)
        service = app_state(request.scope)["batch"]
        info = await page.deps.keystore.team_info(team)
        if info is None:
            raise GatewayError(ErrorCode.TEAM_NOT_FOUND, f"No team named '{team}'.")
        context: dict[str, object] = {"team": team, "enabled": service is not None, "batches": []}
        if service is not None:
            batches, more = await service.batches.page(team, info.id, after=None, limit=_LISTED)
            rows = []
            for batch in batches:
                done = batch.completed + batch.failed
                rows.append(
                    {
                        **batch.public(),
                        "done": done,
                        "percent": 100 if batch.total == 0 else int(100 * done / batch.total),
                    }
                )
            context.update(
                batches=rows,
                more=more,
                queued=await service.batches.queued(team),
                running=await service.batches.running(team),
            )
        return self._console.render(request, "batches.html", context, session=page.session)
