"""Role bindings in the console: who holds which role (platform admins and auditors read it),
bind and unbind (platform admins). The same store, checks and audit entries as the admin API's
/admin/v1/role-bindings (gateway/admin/role_routes.py)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.admin.access import bound_team_ids
from gateway.admin.role_routes import new_binding
from gateway.console.web import Console, Page, redirect
from gateway.errors import ErrorCode, GatewayError
from gateway.identity.bindings import BINDING_ID_RE
from gateway.identity.roles import Role

_NOTICES = {
    "bound": "Role bound.",
    "unbound": "Role binding removed.",
    "exists": "That binding exists already.",
}


class Roles:
    def __init__(self, console: Console) -> None:
        self._console = console

    async def _context(self, page: Page) -> dict[str, Any]:
        bindings = await page.deps.bindings.all()
        ids = await bound_team_ids(page.deps.keystore, bindings)
        return {
            "bindings": [b.public(active=b.active(ids)) for b in bindings],
            "roles": [r.value for r in Role],
            "teams": await page.deps.keystore.list_teams(),
            "form": {},
            "notice": None,
        }

    async def index(self, request: Request, page: Page) -> Response:
        context = await self._context(page)
        context["notice"] = _NOTICES.get(request.query_params.get("done", ""))
        return self._console.render(request, "roles.html", context, session=page.session)

    async def bind(self, request: Request, page: Page) -> Response:
        form = page.form
        kind = form.get("kind")
        body: dict[str, Any] = {
            "role": form.get("role"),
            kind if kind in ("group", "user") else "group": form.get("subject").strip(),
        }
        if form.get("team"):
            body["team"] = form.get("team")
        try:
            _, existing = await new_binding(
                body, page.deps, page.journal(request), page.caller.principal.actor()
            )
        except GatewayError as exc:
            context = await self._context(page)
            context.update(error=exc.message, form=form.values())
            return self._console.render(
                request, "roles.html", context, session=page.session, status=exc.status
            )
        return redirect("/roles?done=" + ("exists" if existing else "bound"))

    async def unbind(self, request: Request, page: Page) -> Response:
        binding_id = request.path_params["binding_id"]
        removed = await page.deps.bindings.remove(binding_id) if BINDING_ID_RE.fullmatch(binding_id) else None
        if removed is None:
            raise GatewayError(ErrorCode.NOT_FOUND, "No role binding has that id.")
        await page.journal(request).write(
            "role.unbound", team=removed.team or "", before=removed.audited(), after={}
        )
        return redirect("/roles?done=unbound")
