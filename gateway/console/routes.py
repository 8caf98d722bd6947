"""The web admin console under /admin/ui/: built once per app from the settings (create_app mounts
it). Pages: Teams, a team's Keys, Usage, Models, Audit; sign in and out.

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
from gateway.console.keys import Keys
from gateway.console.live import Live
from gateway.console.signin import SignIn
from gateway.console.teams import Teams
from gateway.console.usage import Usage
from gateway.console.web import BASE, HERE, Console, NotFoundPages, Page, SecurityHeaders, redirect


def console_mount(settings: Settings) -> Mount:
    console = Console(settings)
    signin, teams, keys, usage, live = (
        SignIn(console),
        Teams(console),
        Keys(console),
        Usage(console),
        Live(console),
    )

    async def home(request: Request, page: Page) -> Response:
        return redirect("/teams")

    page = console.page
    routes: list[BaseRoute] = [
        _route("/", GET=page(home)),
        _route("/login", GET=signin.form, POST=signin.submit),
        _route("/logout", POST=page(signin.sign_out)),
        _route("/teams", GET=page(teams.index), POST=page(teams.create)),
        _route("/teams/{team}", GET=page(teams.show), POST=page(teams.update)),
        _route("/teams/{team}/delete", POST=page(teams.delete)),
        _route("/teams/{team}/keys", GET=page(keys.index), POST=page(keys.create)),
        _route("/keys/{key_id}", GET=page(keys.show), POST=page(keys.update)),
        _route("/keys/{key_id}/rotate", POST=page(keys.rotate)),
        _route("/keys/{key_id}/revoke", POST=page(keys.revoke)),
        _route("/usage", GET=page(usage.index)),
        _route("/usage.csv", GET=page(usage.csv)),
        _route("/models", GET=page(live.models)),
        _route("/models/fragment", GET=page(live.models_fragment)),
        _route("/audit", GET=page(live.audit)),
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
