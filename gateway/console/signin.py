"""Signing in with the admin token, and out.

The token is checked as the admin API checks it: digests compared in constant time, and the same
per-address throttle (gateway/admin/throttle.py), so the console is no way around the API's
throttle: an address that keeps guessing gets 429 here and there on a wrong token, while the right
token always signs in. A sign-in another site's page sends (Sec-Fetch-Site) is refused before the
throttle counts it: no page elsewhere can spend an address's tries.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time

from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway.admin.deps import AdminDeps
from gateway.console.forms import read_form
from gateway.console.web import BASE, Console, Page, cross_site, redirect, safe_next
from gateway.errors import GatewayError
from gateway.observability.logs import loggable
from gateway.redis import keys as redis_keys

log = logging.getLogger("sluicegate.console")


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class SignIn:
    def __init__(self, console: Console) -> None:
        self._console = console

    async def form(self, request: Request) -> Response:
        console = self._console
        if console.sessions is None:
            return console.render(request, "disabled.html", status=403)
        try:
            async with asyncio.timeout(console.settings.redis_timeout_s):
                signed_in = await console.current(request) is not None
        except (RedisError, TimeoutError):
            signed_in = False  # the form, then: signing in says what is wrong
        if signed_in:
            return redirect("/")
        return console.render(
            request, "login.html", {"next": safe_next(request.query_params.get("next", ""))}
        )

    async def submit(self, request: Request) -> Response:
        console = self._console
        sessions = console.sessions
        expected = console.settings.admin_token
        if sessions is None or expected is None:
            return console.render(request, "disabled.html", status=403)
        if cross_site(request):
            # Before the throttle: another site's page must not spend this address's tries.
            log.warning("console sign-in refused: sent from another site")
            return console.render(
                request,
                "login.html",
                {"next": f"{BASE}/", "error": "This sign-in did not come from the console's own page."},
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
            _, cookie = sessions.new()
            response = RedirectResponse(target, status_code=303)
            sessions.set_cookie(response, request, cookie)
            return response
        retry_after = throttle.retry_after(address)
        if retry_after is not None:
            locked = console.render(
                request,
                "login.html",
                {
                    "next": target,
                    "error": f"Too many wrong admin tokens from this address; try again in {retry_after} s.",
                },
                status=429,
            )
            locked.headers["retry-after"] = str(retry_after)  # as the admin API's 429 says it
            return locked
        throttle.failed(address)
        # Never the presented value: it may be the real token with a typo.
        log.warning("console sign-in refused: peer=%s", loggable(address or "-"))
        return console.render(
            request, "login.html", {"next": target, "error": "That is not the admin token."}, status=401
        )

    async def sign_out(self, request: Request, page: Page) -> Response:
        sessions = self._console.sessions
        assert sessions is not None  # page() answers "disabled" first
        left = int(page.session.expires_at - time.time()) + 1
        try:
            await page.redis.set(redis_keys.console_signed_out(page.session.id), b"1", ex=max(left, 1))
        except RedisError:
            log.warning("console sign-out not recorded in Redis: the cookie is cleared only")
        response = RedirectResponse(f"{BASE}/login", status_code=303)
        sessions.clear_cookie(response, request)
        return response
