"""Models and Audit: what the router sees now (refreshed by htmx polling a fragment; a plain
reload without JavaScript), and the admin audit log, paged."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from gateway.admin import audit, validation
from gateway.admin.models import snapshot
from gateway.console.web import Console, Page
from gateway.identity.roles import Action

AUDIT_PAGE = 50
# How often the Models page asks for a fresh fragment (htmx `every`), in seconds.
POLL_S = 2


class Live:
    def __init__(self, console: Console) -> None:
        self._console = console

    async def models(self, request: Request, page: Page) -> Response:
        context = {"models": snapshot(page.deps.router), "poll_s": POLL_S}
        return self._console.render(request, "models.html", context, session=page.session)

    async def models_fragment(self, request: Request, page: Page) -> Response:
        context = {"models": snapshot(page.deps.router), "poll_s": POLL_S}
        return self._console.render(request, "_models.html", context, session=page.session)

    async def audit(self, request: Request, page: Page) -> Response:
        query = request.query_params
        team = query.get("team", "").strip()
        teams = visible = page.caller.teams(Action.READ_AUDIT)
        if team:
            page.require(Action.READ_AUDIT, validation.team_name(team))
            teams = frozenset({team})
        elif teams is not None and not teams:
            page.require(Action.READ_AUDIT, None)
        entries, more = await page.deps.audit.entries(
            teams=teams,
            since_ms=None,
            before=audit.parse_before(query.get("before")),
            limit=AUDIT_PAGE,
        )
        context = {
            "entries": entries,
            "more": more,
            "team": team,
            "teams": [t for t in await page.deps.keystore.list_teams() if visible is None or t in visible],
        }
        return self._console.render(request, "audit.html", context, session=page.session)
