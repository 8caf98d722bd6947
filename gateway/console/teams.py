"""Teams: the list (limits, per-model limits, budgets, weight, priority, this month's tokens),
create, edit, delete.

Every change goes through the key store with the request's audit journal, as the admin API's do,
and validation is the API's own (gateway/admin/validation.py, gateway/limits/spec.py).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.admin import validation
from gateway.console.forms import (
    TEAM_FIELDS,
    Form,
    FormErrors,
    limit_body,
    model_limit_body,
    model_limit_rows,
)
from gateway.console.web import Console, Page, redirect
from gateway.errors import GatewayError
from gateway.identity.roles import Action
from gateway.limits.spec import LimitSet, parse_limits
from gateway.metering import usage_report

_NOTICES = {
    "created": "Team created.",
    "updated": "Limits saved.",
    "deleted": "Team deleted; its keys are revoked.",
}


def notice(request: Request, notices: dict[str, str]) -> str | None:
    """A fixed message named in the query (after a redirect): never text from the URL itself."""
    return notices.get(request.query_params.get("done", ""))


def served_models(page: Page) -> list[str]:
    """The names of the models served now (not their aliases: limits are kept by name)."""
    return sorted(route.model.name for route in page.deps.router.models())


def limits_body(
    form: Form, fields: tuple[str, ...], page: Page, current: LimitSet | None, errors: FormErrors
) -> tuple[dict[str, Any], list[str]]:
    """A team's or key's form as the admin API's body (per-model limits included), and the names
    left blank: to clear on an edit. A model with limits already may keep them though no longer
    served; a new one must be served. Problems go to `errors`, every one of them."""
    body, blank = limit_body(form, fields, errors, budgets=fields == TEAM_FIELDS)
    known = {*served_models(page), *(current.per_model if current is not None else ())}
    per_model, blank_models = model_limit_body(form, known, errors)
    if per_model:
        body["model_limits"] = per_model
    return body, [*blank, *blank_models]


class Teams:
    def __init__(self, console: Console) -> None:
        self._console = console

    async def _list_context(self, page: Page) -> dict[str, Any]:
        store = page.deps.keystore
        visible = page.caller.teams(Action.READ_TEAM)
        names = [n for n in await store.list_teams() if visible is None or n in visible]
        month_start = dt.datetime.now(dt.UTC).date().replace(day=1)
        rows = await page.deps.meter.report(names, month_start, None)
        tokens = {row["team"]: row["total_tokens"] for row in usage_report.group(rows, "team")}
        teams = []
        for name in names:
            limits = await store.team_limits(name)
            if limits is None:  # deleted meanwhile
                continue
            teams.append({"name": name, "limits": limits.as_dict(), "month_tokens": tokens.get(name, 0)})
        return {
            "teams": teams,
            "fields": TEAM_FIELDS,
            "form": {},
            "model_rows": model_limit_rows(served_models(page), None),
        }

    async def index(self, request: Request, page: Page) -> Response:
        context = await self._list_context(page)
        context["notice"] = notice(request, _NOTICES)
        return self._console.render(request, "teams.html", context, session=page.session)

    async def create(self, request: Request, page: Page) -> Response:
        form = page.form
        try:
            errors = FormErrors()
            name = errors.check(lambda: validation.team_name(form.get("name").strip(), "name"))
            body, _ = limits_body(form, TEAM_FIELDS, page, None, errors)
            errors.raise_any()
            assert name is not None  # checked
            limits = parse_limits(body, budgets=True)
            await page.deps.keystore.create_team(name, limits, journal=page.journal(request))
        except GatewayError as exc:
            context = await self._list_context(page)
            context.update(
                error=exc.message,
                form=form.values(),
                model_rows=model_limit_rows(served_models(page), None, form),
            )
            return self._console.render(
                request, "teams.html", context, session=page.session, status=exc.status
            )
        return redirect(f"/teams/{name}?done=created")

    async def _team_context(self, page: Page, name: str, sent: Form | None = None) -> dict[str, Any]:
        team = await page.deps.keystore.team(name)
        keys = await page.deps.keystore.list_keys(name)
        stored = await page.deps.keystore.team_limits(name)
        limits = stored.as_dict() if stored is not None else {}
        form = {field: str(limits.get(field, "")) for field in TEAM_FIELDS}
        form["tpm_counts"] = str(limits.get("tpm_counts", "total"))
        if sent is not None:
            form = sent.values()
        active = sum(1 for k in keys if not k.revoked)
        return {
            "team": team,
            "fields": TEAM_FIELDS,
            "form": form,
            "active_keys": active,
            "model_rows": model_limit_rows(served_models(page), stored, sent),
        }

    async def show(self, request: Request, page: Page) -> Response:
        name = validation.team_name(request.path_params["team"])
        page.require(Action.READ_TEAM, name)
        context = await self._team_context(page, name)
        context["notice"] = notice(request, _NOTICES)
        return self._console.render(request, "team.html", context, session=page.session)

    async def update(self, request: Request, page: Page) -> Response:
        name = validation.team_name(request.path_params["team"])
        form = page.form
        try:
            current = await page.deps.keystore.team_limits(name)
            errors = FormErrors()
            body, blank = limits_body(form, TEAM_FIELDS, page, current, errors)
            errors.raise_any()
            changes, cleared = validation.limit_changes({**body, "clear": blank}, budgets=True)
            await page.deps.keys.update_team(name, changes, cleared, journal=page.journal(request))
        except GatewayError as exc:
            context = await self._team_context(page, name, form)
            context["error"] = exc.message
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
