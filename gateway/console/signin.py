"""The sign-in page, signing in with the break-glass admin token, and signing out.

The sign-in page offers the company's IdP first when it is configured (gateway/console/sso.py),
and the admin token behind a link. The token is checked as the admin API checks it: digests
compared in constant time, and the same per-address throttle (gateway/admin/throttle.py), so the
console is no way around the API's throttle: an address that keeps guessing gets 429 here and
there on a wrong token, while the right token always signs in. A sign-in another site's page sends
(Sec-Fetch-Site) is refused before the throttle counts it: no page elsewhere can spend an
address's tries. Every sign-in, sign-out and failed sign-in is an audit entry (SignInAudit).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway.admin.deps import AdminDeps
from gateway.console.forms import read_form
from gateway.console.signin_audit import SignInAudit
from gateway.console.web import BASE, Console, Page, cross_site, redirect, safe_next
from gateway.errors import GatewayError, StoreUnavailable
from gateway.identity.principal import BREAK_GLASS
from gateway.observability.logs import loggable

log = logging.getLogger("sluicegate.console")


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class SignIn:
    def __init__(self, console: Console, audit: SignInAudit) -> None:
        self._console = console
        self._audit = audit

    async def form(self, request: Request) -> Response:
        console = self._console
        if not console.enabled:
            return console.render(request, "disabled.html", status=403)
        try:
            async with asyncio.timeout(console.settings.redis_timeout_s):
                signed_in = await console.current(request) is not None
        except (TimeoutError, GatewayError):
            signed_in = False  # the form, then: signing in says what is wrong
        if signed_in:
            return redirect("/")
        context = {
            "next": safe_next(request.query_params.get("next", "")),
            "with_token": "token" in request.query_params,
        }
        return console.render(request, "login.html", context)

    async def submit(self, request: Request) -> Response:
        console = self._console
        expected = console.settings.admin_token
        if expected is None:
            return console.render(request, "disabled.html", status=403)
        if cross_site(request):
            # Before the throttle: another site's page must not spend this address's tries.
            log.warning("console sign-in refused: sent from another site")
            return console.render(
                request,
                "login.html",
                {
                    "next": f"{BASE}/",
                    "with_token": True,
                    "error": "This sign-in did not come from the console's own page.",
                },
                status=403,
            )
        deps = AdminDeps.of(request.scope)
        throttle = deps.throttle
        address = throttle.address(request.scope)
        try:
            form = await read_form(request, console.settings.body_timeout_s)
        except GatewayError as exc:
            return console.error(request, exc, None)
        target = safe_next(form.get("next"))
        if hmac.compare_digest(_digest(form.get("token")), _digest(expected)):
            # The right token always signs in, locked-out address or not (gateway/admin/throttle.py).
            try:
                _, cookie = await deps.sessions.new(BREAK_GLASS, bound_to=deps.access.token_fingerprint)
                await self._audit.signed_in(deps, BREAK_GLASS, address, via="admin-token")
            except GatewayError as exc:  # StoreUnavailable among them: a 503 redis_unavailable
                return console.error(request, exc, None)
            response = RedirectResponse(target, status_code=303)
            deps.sessions.set_cookie(response, request, cookie)
            return response
        retry_after = throttle.retry_after(address)
        context = {"next": target, "with_token": True}
        if retry_after is not None:
            context["error"] = f"Too many wrong admin tokens from this address; try again in {retry_after} s."
            locked = console.render(request, "login.html", context, status=429)
            locked.headers["retry-after"] = str(retry_after)  # as the admin API's 429 says it
            return locked
        throttle.failed(address)
        # Never the presented value: it may be the real token with a typo.
        log.warning("console sign-in refused: peer=%s", loggable(address or "-"))
        await self._audit.failed(deps, address, "wrong admin token", always=True)
        context["error"] = "That is not the admin token."
        return console.render(request, "login.html", context, status=401)

    async def sign_out(self, request: Request, page: Page) -> Response:
        deps = page.deps
        try:
            await deps.sessions.end(page.session)
            await self._audit.signed_out(deps, page.caller.principal, page.caller.peer)
        except StoreUnavailable:
            log.warning("console sign-out not recorded in Redis: the cookie is cleared only")
        response = RedirectResponse(f"{BASE}/login", status_code=303)
        deps.sessions.clear_cookie(response, request)
        return response
