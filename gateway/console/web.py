"""What every console page shares: the templates, the session check, the CSRF check on every POST,
the security headers, and errors shown as pages instead of the API's JSON envelope.

A handler is `async (request, Page) -> Response`; `page()` wraps it. Built once per app by
gateway/console/routes.py, from the settings: nothing here lives at module level.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.admin.access import Caller, require_some_role
from gateway.admin.audit import RequestJournal
from gateway.admin.deps import AdminDeps
from gateway.admin.guard import redis_unavailable
from gateway.config import Settings
from gateway.console.console_store import ConsoleStore
from gateway.console.forms import Form, read_form
from gateway.console.session import CSRF_FIELD, CSRF_HEADER, Session
from gateway.errors import GatewayError
from gateway.identity.principal import describe
from gateway.identity.roles import Action
from gateway.state import app_state

BASE = "/admin/ui"
HERE = Path(__file__).parent
log = logging.getLogger("sluicegate.console")

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
)
_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


class SecurityHeaders:
    """Plain ASGI: every console response gets the CSP and friends; pages are never cached (they
    show secrets and live state), static files are revalidated (their ETag makes that cheap)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = scope["path"].startswith(f"{BASE}/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (name, value)
                    for name, value in message.get("headers", [])
                    if name.lower() not in (b"cache-control", *(h for h, _ in _HEADERS))
                ]
                headers.extend(_HEADERS)
                # A static file's error page (404, 405) is a page like any other.
                cached = static and message["status"] in (200, 304)
                headers.append((b"cache-control", b"no-cache" if cached else b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class NotFoundPages:
    """Plain ASGI, inside SecurityHeaders: the 404 of a console path no route matches and the 405
    of a method a route does not take (Starlette raises both, from the router and from the static
    files) answered as console pages, with the security headers, not as the API's JSON."""

    def __init__(self, app: ASGIApp, console: Console) -> None:
        self.app = app
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except HTTPException as exc:
            if started or exc.status_code not in (404, 405):
                raise
            request = Request(scope)
            if exc.status_code == 404:
                message = "There is no such page in the console."
            else:
                message = f"This page does not take {request.method} requests."
            response = self.console.render(request, "error.html", {"error": message}, status=exc.status_code)
            for name, value in (exc.headers or {}).items():
                response.headers[name] = value
            await response(scope, receive, send)


def cross_site(request: Request) -> bool:
    """A request another site's page made the browser send: its Fetch Metadata says so (every
    current browser sends Sec-Fetch-Site). A console POST comes from a console page, same-origin;
    one from elsewhere is refused before anything counts it, so a page on another site cannot
    spend the sign-in throttle's tries and lock the admin out (login CSRF)."""
    site = request.headers.get("sec-fetch-site")
    return site is not None and site.strip().lower() != "same-origin"


_FOREIGN_FORM = "This form did not come from the console: open the page again and resend it."


@dataclass(frozen=True, slots=True)
class Page:
    """One console request, signed in: the admin API's dependencies, the session, who is calling
    and what they may do (read from the role bindings on every request), the form."""

    deps: AdminDeps
    store: ConsoleStore
    session: Session
    form: Form
    caller: Caller

    def journal(self, request: Request) -> RequestJournal:
        # The same journal as the admin API's writes (gateway/admin/guard.py): who, from where.
        return self.deps.audit.by(self.caller.principal.actor(), self.caller.peer)

    def require(self, action: Action, team: str | None = None) -> None:
        self.caller.require(action, team)


Handler = Callable[[Request, Page], Awaitable[Response]]


def _when(value: float | None) -> str:
    if value is None:
        return ""
    return dt.datetime.fromtimestamp(value, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _number(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else ("" if value is None else str(value))


def _model_limits_text(limits: Mapping[str, Any]) -> str:
    """The per-model part of LimitSet.as_dict() on one line: `qwen: rpm=5 tpm=100; llama: rpm=2`."""
    per_model: Mapping[str, Mapping[str, Any]] = limits.get("model_limits") or {}
    return "; ".join(
        f"{model}: " + " ".join(f"{name}={_number(value)}" for name, value in own.items())
        for model, own in per_model.items()
    )


def _limits_text(limits: Mapping[str, Any]) -> str:
    """All of LimitSet.as_dict() on one line, the per-model limits last."""
    own = " ".join(f"{name}={_number(value)}" for name, value in limits.items() if name != "model_limits")
    return "; ".join(part for part in (own, _model_limits_text(limits)) if part)


class Console:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,  # everything a user typed is escaped, in every template
            undefined=jinja2.StrictUndefined,
        )
        env.filters["when"] = _when
        env.filters["actor"] = describe
        env.filters["number"] = _number
        env.filters["limits_text"] = _limits_text
        env.filters["model_limits_text"] = _model_limits_text
        env.globals["base"] = BASE
        env.globals["client_base"] = self.client_base
        self.templates = Jinja2Templates(env=env)
        # Signing in takes the admin token, or the IdP when the console's client is configured.
        self.sso = bool(settings.oidc and settings.oidc_client_id and settings.oidc_client_secret)
        self.enabled = bool(settings.admin_token) or self.sso

    def client_base(self, request: Request) -> str:
        """Where this browser reaches the client APIs, for the new-key snippets: the console's own
        address, or its host on the client port when the admin plane has its own (edge/planes.py).
        Shown to the signed-in admin only, never used to redirect."""
        url = request.base_url
        if self.settings.admin_port is not None:
            url = url.replace(port=self.settings.port)
        return str(url).rstrip("/")

    def render(
        self,
        request: Request,
        template: str,
        context: Mapping[str, Any] | None = None,
        *,
        session: Session | None = None,
        status: int = 200,
    ) -> Response:
        values: dict[str, Any] = {
            "csrf": session.csrf if session else "",
            "signed_in": session is not None,
            "error": None,
            "me": None,
            "can": _nothing,
            "sso": self.sso,
            "token_sign_in": bool(self.settings.admin_token),
        }
        caller = request.scope.get(_CALLER)
        if session is not None and isinstance(caller, Caller):
            values["me"] = {
                "who": describe(caller.principal.actor()),
                "roles": [
                    g.role.value + (f" of {g.team}" if g.team else "") for g in caller.permissions.grants
                ],
            }
            values["can"] = _can(caller)
        values.update(context or {})
        return self.templates.TemplateResponse(request, template, values, status_code=status)

    def error(self, request: Request, exc: GatewayError, session: Session | None) -> Response:
        # The message is the API's own: it never holds a secret (gateway/errors.py).
        response = self.render(
            request, "error.html", {"error": exc.message}, session=session, status=exc.status
        )
        response.headers.update(exc.headers)  # a 408's `connection: close`, a 503's `retry-after`
        return response

    async def current(self, request: Request) -> Session | None:
        """The request's session, unless forged, expired or signed out."""
        return await AdminDeps.of(request.scope).sessions.read(request)

    def page(self, handler: Handler, action: Action | None) -> Callable[[Request], Awaitable[Response]]:
        """`action`: what the page needs (None: any signed-in person); a page about one team
        checks that team itself (Page.require), as the admin API's handlers do."""

        async def endpoint(request: Request) -> Response:
            if not self.enabled:
                return self.render(request, "disabled.html", status=403)
            session: Session | None = None
            deps = AdminDeps.of(request.scope)
            store = app_state(request.scope)["console_store"]
            redis_bound = 4 * self.settings.redis_timeout_s  # a few Redis round trips together
            try:
                async with asyncio.timeout(redis_bound):
                    session = await self.current(request)
                    if session is None:
                        return _to_login(request)
                    peer = deps.throttle.address(request.scope)
                    caller = await deps.access.caller_for(session.principal, peer, bound_to=session.bound_to)
                if caller is None:  # deactivated, or no longer who they were
                    await deps.sessions.end(session)
                    return _to_login(request)
                request.scope[_CALLER] = caller
                require_some_role(caller, action)
                form = Form([])
                if request.method == "POST":
                    if cross_site(request):
                        log.warning("console POST refused: sent from another site")
                        return self.render(
                            request, "error.html", {"error": _FOREIGN_FORM}, session=session, status=403
                        )
                    # Outside the Redis bound: the body has its own (a slow client gets a 408,
                    # not "Redis is unavailable").
                    form = await read_form(request, self.settings.body_timeout_s)
                    given = form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER)
                    if not deps.sessions.csrf_ok(session, given):
                        log.warning("console POST refused: missing or wrong CSRF token")
                        return self.render(
                            request,
                            "error.html",
                            {
                                "error": "This form has expired or did not come from the console: "
                                "open the page again and resend it."
                            },
                            session=session,
                            status=403,
                        )
                async with asyncio.timeout(redis_bound):
                    return await handler(request, Page(deps, store, session, form, caller))
            except GatewayError as exc:
                return self.error(request, exc, session)
            except TimeoutError:
                return self.error(
                    request,
                    redis_unavailable(),
                    session,
                )

        return endpoint


_CALLER = "sluicegate.console_caller"


_ANY_TEAM = object()


def _nothing(action: str, team: object = _ANY_TEAM) -> bool:
    return False


def _can(caller: Caller) -> Callable[..., bool]:
    """For templates: `can("MANAGE_KEYS", team)` shows a form only to whom the server would let
    use it (the server refuses the others all the same); without a team, on any team."""

    def can(action: str, team: object = _ANY_TEAM) -> bool:
        if team is _ANY_TEAM:
            return caller.permissions.could(Action[action])
        return caller.permissions.allows(Action[action], team if isinstance(team, str) else None)

    return can


def _to_login(request: Request) -> Response:
    target = f"{BASE}/login?next={quote(request.url.path)}"
    if request.headers.get("hx-request"):
        # htmx follows a redirect inside its XHR and would swap the login form into a fragment.
        return Response(status_code=204, headers={"hx-redirect": target})
    return RedirectResponse(target, status_code=303)


_MAX_NEXT_CHARS = 512


def safe_next(value: str) -> str:
    """Where to go after signing in: only a console path, never another site (`//evil`), and
    short (it is kept with a sign-in under way, before anyone is known)."""
    if (
        value.startswith(f"{BASE}/")
        and not value.startswith("//")
        and "\\" not in value
        and len(value) <= _MAX_NEXT_CHARS
    ):
        return value
    return f"{BASE}/"


def redirect(path: str) -> Response:
    """After a change: 303, so a reload asks again with GET and never resends the form."""
    return RedirectResponse(f"{BASE}{path}", status_code=303)
