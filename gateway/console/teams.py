"""Teams: the list (limits, budgets, weight, this month's tokens), create, edit, delete.

Every change goes through the key store with the request's audit journal, as the admin API's do,
and validation is the API's own (gateway/admin/validation.py, gateway/limits/spec.py).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.admin import validation
from gateway.console.forms import TEAM_FIELDS, limit_body
from gateway.console.web import Console, Page, redirect
from gateway.errors import GatewayError
from gateway.limits.spec import parse_limits
from gateway.metering import usage_report

_NOTICES = {
    "created": "Team created.",
    "updated": "Limits saved.",
    "deleted": "Team deleted; its keys are revoked.",
}


def notice(request: Request, notices: dict[str, str]) -> str | None:
    """A fixed message named in the query (after a redirect): never text from the URL itself."""
    return notices.get(request.query_params.get("done", ""))


class Teams:
    def __init__(self, console: Console) -> None:
        self._console = console

    async def _list_context(self, page: Page) -> dict[str, Any]:
        store = page.deps.keystore
        names = await store.list_teams()
        month_start = dt.datetime.now(dt.UTC).date().replace(day=1)
        rows = await page.deps.meter.report(names, month_start, None)
        tokens = {row["team"]: row["total_tokens"] for row in usage_report.group(rows, "team")}
        teams = []
        for name in names:
            limits = await store.team_limits(name)
            if limits is None:  # deleted meanwhile
                continue
            teams.append({"name": name, "limits": limits.as_dict(), "month_tokens": tokens.get(name, 0)})
        return {"teams": teams, "fields": TEAM_FIELDS, "form": {}}

    async def index(self, request: Request, page: Page) -> Response:
        context = await self._list_context(page)
        context["notice"] = notice(request, _NOTICES)
        return self._console.render(request, "teams.html", context, session=page.session)

    async def create(self, request: Request, page: Page) -> Response:
        form = page.form
        try:
            name = validation.team_name(form.get("name").strip(), "name")
            body, _ = limit_body(form, TEAM_FIELDS)
            limits = parse_limits(body, budgets=True)
            await page.deps.keystore.create_team(name, limits, journal=page.journal(request))
        except GatewayError as exc:
            context = await self._list_context(page)
            context.update(error=exc.message, form=form.values())
            return self._console.render(
                request, "teams.html", context, session=page.session, status=exc.status
            )
        return redirect(f"/teams/{name}?done=created")

    async def _team_context(self, page: Page, name: str) -> dict[str, Any]:
        team = await page.deps.keystore.team(name)
        keys = await page.deps.keystore.list_keys(name)
        limits = team["limits"]
        assert isinstance(limits, dict)
        form = {field: str(limits.get(field, "")) for field in TEAM_FIELDS}
        form["tpm_counts"] = str(limits.get("tpm_counts", "total"))
        active = sum(1 for k in keys if not k.revoked)
        return {"team": team, "fields": TEAM_FIELDS, "form": form, "active_keys": active}

    async def show(self, request: Request, page: Page) -> Response:
        name = validation.team_name(request.path_params["team"])
        context = await self._team_context(page, name)
        context["notice"] = notice(request, _NOTICES)
        return self._console.render(request, "team.html", context, session=page.session)

    async def update(self, request: Request, page: Page) -> Response:
        name = validation.team_name(request.path_params["team"])
        form = page.form
        try:
            body, blank = limit_body(form, TEAM_FIELDS)
            changes, cleared = validation.limit_changes({**body, "clear": blank}, budgets=True)
            await page.deps.keys.update_team(name, changes, cleared, journal=page.journal(request))
        except GatewayError as exc:
            context = await self._team_context(page, name)
            context.update(error=exc.message, form=form.values())
            return self._console.render(
                request, "team.html", context, session=page.session, status=exc.status
            )
        return redirect(f"/teams/{name}?done=updated")

    async def delete(self, request: Request, page: Page) -> Response:
        name = validation.team_name(request.path_params["team"])
        if page.form.get("confirm").strip() != name:
            context = await self._team_context(page, name)
            context["error"] = "Type the team's name to confirm: deleting it revokes all its keys."
            return self._console.render(request, "team.html", context, session=page.session, status=400)
        await page.deps.keys.delete_team(name, journal=page.journal(request))
        return redirect("/teams?done=deleted")
