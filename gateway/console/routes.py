"""The web admin console under /admin/ui/: built once per app from the settings (create_app mounts
it). Pages: Teams, a team's Keys and Batches, Usage, Models, Audit, Roles; sign in (the IdP, or the admin
token) and out.

Every handler but the sign-in form goes through Console.page (gateway/console/web.py): signed in,
and on POST a CSRF token, or it does nothing. Every response carries the console's CSP and
security headers (web.SecurityHeaders).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route, Router
from starlette.staticfiles import StaticFiles

from gateway.config import Settings
from gateway.console.batches import Batches
from gateway.console.keys import Keys
from gateway.console.live import Live
from gateway.console.roles import Roles
from gateway.console.signin import SignIn
from gateway.console.signin_audit import SignInAudit
from gateway.console.sso import SingleSignOn
from gateway.console.teams import Teams
from gateway.console.usage import Usage
from gateway.console.web import BASE, HERE, Console, NotFoundPages, Page, SecurityHeaders, redirect
from gateway.identity.roles import Action


def console_mount(settings: Settings) -> Mount:
    console = Console(settings)
    audit = SignInAudit()
    signin, sso = SignIn(console, audit), SingleSignOn(console, audit)
    teams, keys, usage, live, roles = (
        Teams(console),
        Keys(console),
        Usage(console),
        Live(console),
        Roles(console),
    )

    async def home(request: Request, page: Page) -> Response:
        if page.caller.permissions.empty:
            return console.render(request, "no_role.html", session=page.session, status=403)
        return redirect("/teams" if page.caller.permissions.could(Action.READ_TEAM) else "/usage")

    batches = Batches(console)
    page = console.page
    # Each page with what it needs; a page about one team checks that team too (Page.require).
    routes: list[BaseRoute] = [
        _route("/", GET=page(home, None)),
        _route("/login", GET=signin.form, POST=signin.submit),
        _route("/oidc/login", GET=sso.start),
        _route("/oidc/callback", GET=sso.callback),
        _route("/logout", POST=page(signin.sign_out, None)),
        _route("/teams", GET=page(teams.index, Action.READ_TEAM), POST=page(teams.create, Action.ADMINISTER)),
        _route(
            "/teams/{team}",
            GET=page(teams.show, Action.READ_TEAM),
            POST=page(teams.update, Action.ADMINISTER),
        ),
        _route("/teams/{team}/delete", POST=page(teams.delete, Action.ADMINISTER)),
        _route("/teams/{team}/batches", GET=page(batches.index, Action.READ_TEAM)),
        _route(
            "/teams/{team}/keys",
            GET=page(keys.index, Action.READ_KEYS),
            POST=page(keys.create, Action.MANAGE_KEYS),
        ),
        _route(
            "/keys/{key_id}",
            GET=page(keys.show, Action.READ_KEYS),
            POST=page(keys.update, Action.MANAGE_KEYS),
        ),
        _route("/keys/{key_id}/rotate", POST=page(keys.rotate, Action.MANAGE_KEYS)),
        _route("/keys/{key_id}/revoke", POST=page(keys.revoke, Action.MANAGE_KEYS)),
        _route("/usage", GET=page(usage.index, Action.READ_USAGE)),
        _route("/usage.csv", GET=page(usage.csv, Action.READ_USAGE)),
        _route("/models", GET=page(live.models, Action.READ_PLATFORM)),
        _route("/models/fragment", GET=page(live.models_fragment, Action.READ_PLATFORM)),
        _route("/audit", GET=page(live.audit, Action.READ_AUDIT)),
        _route(
            "/roles", GET=page(roles.index, Action.READ_PLATFORM), POST=page(roles.bind, Action.ADMINISTER)
        ),
        _route("/roles/{binding_id}/delete", POST=page(roles.unbind, Action.ADMINISTER)),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="console-static"),
    ]
    # No slash redirects: their Location would come from the client's Host header (app.py).
    return Mount(BASE, app=SecurityHeaders(NotFoundPages(Router(routes, redirect_slashes=False), console)))


Endpoint = Callable[[Request], Awaitable[Response]]


def _route(path: str, **handlers: Endpoint) -> Route:
    """One Route per path: Starlette answers a method no Route takes with the `Allow` of the first
    Route whose path matches, so a GET Route and a POST Route for one path would name only GET."""

    async def endpoint(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await handlers[method](request)

    return Route(path, endpoint, methods=list(handlers))
