"""The admin plane on a listener of its own (SLUICEGATE_ADMIN_PORT; docs/deploy.md "Admin port").

With an admin port, one uvicorn server (one drain, one lifespan) listens on two sockets, and each
route exists on one of them only: the client APIs on the client port, the admin API, the console
and /metrics on the admin port; /healthz, /readyz and `GET /` on both. A request on the wrong
listener finds no route, so it gets the ordinary 404 of its API family, naming only the routes of
that listener: an ingress path rule is then never the only thing between the internet and the
admin token's login form.

Which listener a request came through is the local address of its connection (`scope["server"]`,
set by uvicorn from the socket), never a header the client could write.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from starlette.routing import BaseRoute, Match
from starlette.types import Receive, Scope, Send


def on_admin_listener(scope: Scope, admin_port: int) -> bool:
    server = scope.get("server")
    return server is not None and server[1] == admin_port


class OnListener(BaseRoute):
    """`route`, present on the admin listener only (`admin`) or on the client listener only."""

    def __init__(self, route: BaseRoute, *, admin: bool, admin_port: int) -> None:
        self.route = route
        self.admin = admin
        self.admin_port = admin_port

    def here(self, scope: Scope) -> bool:
        return on_admin_listener(scope, self.admin_port) == self.admin

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if not self.here(scope):
            return Match.NONE, {}
        return self.route.matches(scope)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.route.handle(scope, receive, send)

    def url_path_for(self, name: str, /, **path_params: Any) -> Any:
        return self.route.url_path_for(name, **path_params)


def place(
    client: Iterable[BaseRoute], admin: Iterable[BaseRoute], both: Iterable[BaseRoute], admin_port: int | None
) -> list[BaseRoute]:
    """The app's routes: every one on the one listener when there is no admin port."""
    if admin_port is None:
        return [*client, *admin, *both]
    return [
        *(OnListener(route, admin=False, admin_port=admin_port) for route in client),
        *(OnListener(route, admin=True, admin_port=admin_port) for route in admin),
        *both,
    ]


def routes_here(routes: Iterable[BaseRoute], scope: Scope) -> list[BaseRoute]:
    """The routes a request's listener serves, unwrapped (what a 404 or a 405 names)."""
    out: list[BaseRoute] = []
    for route in routes:
        if isinstance(route, OnListener):
            if route.here(scope):
                out.append(route.route)
        else:
            out.append(route)
    return out
