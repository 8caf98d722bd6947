"""Signing in to the console through the company's IdP: the authorization code flow with PKCE.

    GET /admin/ui/oidc/login?next=   a new flow: its state, nonce and PKCE verifier stored in Redis
                                     under the state (10 minutes), a browser-binding cookie, and a
                                     redirect to the IdP's authorization endpoint
    GET /admin/ui/oidc/callback      the IdP sends the person back: the flow is taken once
                                     (GETDEL), the code exchanged for an ID token, the ID token
                                     checked (gateway/identity/tokens.py: signature, issuer,
                                     audience the console's client, nonce), a session made

The session cookie is SameSite=Strict, and the IdP's return is a cross-site navigation, so the
flow never depends on it: the flow lives in Redis, under a state only this sign-in knows. The
flow is also bound to the browser that started it, by a SameSite=Lax cookie (sent on that
top-level return) whose digest the flow keeps: a callback URL someone else started and sends to a
victim signs nobody in (login CSRF), and a callback used once, or replayed from another browser,
finds no flow. Every failure is a clear page and an audit entry, never a 500, never a session.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import logging
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import orjson
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway.admin.deps import AdminDeps
from gateway.console.signin_audit import SignInAudit
from gateway.console.web import BASE, Console, safe_next
from gateway.errors import GatewayError, StoreUnavailable
from gateway.identity.code_flow import ExchangeFailed, Flow, exchange_code
from gateway.identity.oidc import IdpUnavailable
from gateway.identity.principal import Kind
from gateway.identity.tokens import TokenRejected
from gateway.state import app_state

log = logging.getLogger("sluicegate.console")
FLOW_TTL_S = 600
FLOW_COOKIE = "sg_oidc"
FLOW_PATH = f"{BASE}/oidc"
SCOPE = "openid email profile groups"
_STATE_RE = re.compile(r"[A-Za-z0-9_-]{16,64}")
_IDP_ERROR_RE = re.compile(r"[a-z_]{1,40}")


class FlowLimiter:
    """Starting a sign-in writes to Redis before anyone is known, so each address may start at
    most `per_minute` a minute (a person needs a few; an IPv6 address counts by its /64, which one
    host can fill), and this replica at most `replica_per_minute`: a flood cannot fill Redis with
    flows (each at most ~1 KB, for FLOW_TTL_S). Memory is bounded by `max_addresses`, oldest
    first out."""

    def __init__(
        self,
        per_minute: int = 20,
        *,
        replica_per_minute: int = 600,
        max_addresses: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._per_minute = per_minute
        self._replica_per_minute = replica_per_minute
        self._max_addresses = max_addresses
        self._clock = clock
        self._windows: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self._replica: tuple[float, int] = (clock(), 0)

    def __len__(self) -> int:
        return len(self._windows)

    def allow(self, address: str) -> bool:
        now = self._clock()
        key = _network(address)
        started, count = self._windows.pop(key, (now, 0))
        if now - started >= 60:
            started, count = now, 0
        self._windows[key] = (started, count + 1)
        while len(self._windows) > self._max_addresses:
            self._windows.popitem(last=False)
        replica_started, replica_count = self._replica
        if now - replica_started >= 60:
            replica_started, replica_count = now, 0
        if count >= self._per_minute or replica_count >= self._replica_per_minute:
            self._replica = (replica_started, replica_count)
            return False
        self._replica = (replica_started, replica_count + 1)
        return True


def _network(address: str) -> str:
    """What one client controls: an IPv4 address, or an IPv6 address's /64."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if ip.version == 6:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return address


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class SingleSignOn:
    def __init__(self, console: Console, audit: SignInAudit, limiter: FlowLimiter | None = None) -> None:
        self._console = console
        self._audit = audit
        self._limiter = limiter or FlowLimiter()

    def _redirect_uri(self, request: Request) -> str:
        """SLUICEGATE_PUBLIC_URL's, or the request's own address (the IdP refuses any redirect
        URI not registered with it, so a made-up Host header leads nowhere)."""
        base = self._console.settings.public_url or str(request.base_url).rstrip("/")
        return f"{base}{FLOW_PATH}/callback"

    async def start(self, request: Request) -> Response:
        console, deps = self._console, AdminDeps.of(request.scope)
        verifier = deps.access.verifier
        settings = console.settings
        if not console.sso or verifier is None or settings.oidc_client_id is None:
            return console.render(request, "disabled.html", status=403)
        if not self._limiter.allow(deps.throttle.address(request.scope)):
            page = self._failed_page(
                request, "Too many sign-ins started from this address; try again in a minute.", 429
            )
            page.headers["retry-after"] = "60"
            return page
        flow = Flow.new()
        binding = secrets.token_urlsafe(24)
        redirect_uri = self._redirect_uri(request)
        record = {
            "nonce": flow.nonce,
            "verifier": flow.verifier,
            "next": safe_next(request.query_params.get("next", "")),
            "redirect_uri": redirect_uri,
            "binding": _digest(binding),
        }
        try:
            endpoint = await verifier.discovery.endpoint("authorization_endpoint")
            await app_state(request.scope)["console_store"].put_flow(
                flow.state, orjson.dumps(record), FLOW_TTL_S
            )
        except StoreUnavailable:
            return self._failed_page(request, "Redis is unavailable; try again shortly.", 503)
        except (OSError, ValueError, TimeoutError) as exc:
            log.warning("console sign-in: the identity provider is unreachable (%s)", type(exc).__name__)
            await self._audit.failed(
                deps, deps.throttle.address(request.scope), "identity provider unreachable"
            )
            return self._failed_page(
                request, "The identity provider cannot be reached; try again shortly.", 503
            )
        if endpoint is None:
            return self._failed_page(request, "The identity provider names no authorization endpoint.", 503)
        url = flow.authorize_url(
            endpoint, client_id=settings.oidc_client_id, redirect_uri=redirect_uri, scope=SCOPE
        )
        response = RedirectResponse(url, status_code=303)
        response.set_cookie(
            FLOW_COOKIE,
            binding,
            max_age=FLOW_TTL_S,
            path=FLOW_PATH,
            httponly=True,
            samesite="lax",  # sent on the IdP's top-level return, unlike the session's Strict one
            secure=deps.sessions.over_https(request),
        )
        return response

    async def callback(self, request: Request) -> Response:
        deps = AdminDeps.of(request.scope)
        peer = deps.throttle.address(request.scope)
        query = request.query_params
        state = query.get("state", "")
        if not _STATE_RE.fullmatch(state):
            return await self._failed(
                request, peer, "no valid state", "This sign-in link is not one the console made."
            )
        try:
            raw = await app_state(request.scope)["console_store"].take_flow(state)
        except StoreUnavailable:
            return self._failed_page(request, "Redis is unavailable; try again shortly.", 503)
        if raw is None:
            return await self._failed(
                request,
                peer,
                "unknown or used state",
                "This sign-in has expired or was already used: sign in again.",
            )
        flow: dict[str, Any] = orjson.loads(raw)
        binding = request.cookies.get(FLOW_COOKIE, "")
        if not binding.isascii() or not hmac.compare_digest(_digest(binding), flow["binding"]):
            return await self._failed(
                request,
                peer,
                "started in another browser",
                "This sign-in was started in another browser: sign in again here.",
            )
        error = query.get("error")
        if error is not None:
            word = error if _IDP_ERROR_RE.fullmatch(error) else "error"
            return await self._failed(
                request,
                peer,
                f"identity provider said {word}",
                f"The identity provider did not sign you in ({word}).",
            )
        verifier = deps.access.verifier
        settings = self._console.settings
        if verifier is None or not settings.oidc_client_id or not settings.oidc_client_secret:
            return self._failed_page(request, "Signing in with the identity provider is not configured.", 403)
        issuer = query.get("iss")
        if issuer is not None and issuer != verifier.settings.issuer:  # RFC 9207: a mix-up
            return await self._failed(
                request,
                peer,
                "iss is another issuer",
                "This sign-in came back from another identity provider.",
            )
        code = query.get("code", "")
        if not code or len(code) > 2048:
            return await self._failed(request, peer, "no code", "The identity provider sent no sign-in code.")
        try:
            endpoint = await verifier.discovery.endpoint("token_endpoint")
            if endpoint is None:
                raise ExchangeFailed("no token endpoint")
            id_token = await exchange_code(
                endpoint,
                code=code,
                verifier=flow["verifier"],
                redirect_uri=flow["redirect_uri"],
                client_id=settings.oidc_client_id,
                client_secret=settings.oidc_client_secret,
            )
            principal = await verifier.verify_id_token(
                id_token, client_id=settings.oidc_client_id, nonce=flow["nonce"]
            )
        except ExchangeFailed as exc:
            return await self._failed(
                request,
                peer,
                exc.reason,
                "The identity provider did not accept the sign-in (it may have expired): sign in again.",
            )
        except (OSError, ValueError, TimeoutError, IdpUnavailable):
            return await self._failed(
                request,
                peer,
                "identity provider unreachable",
                "The identity provider cannot be reached; try again shortly.",
                503,
            )
        except TokenRejected as exc:
            return await self._failed(
                request,
                peer,
                f"ID token refused: {exc.reason}",
                "The identity provider's answer could not be verified.",
            )
        if principal.kind is not Kind.PERSON:
            return await self._failed(request, peer, "not a person", "Only people sign in to the console.")
        try:
            _, cookie = await deps.sessions.new(principal)
            await self._audit.signed_in(deps, principal, peer, via="oidc")
        except GatewayError:
            return self._failed_page(request, "Redis is unavailable; try again shortly.", 503)
        response = RedirectResponse(flow["next"], status_code=303)
        deps.sessions.set_cookie(response, request, cookie)
        response.delete_cookie(FLOW_COOKIE, path=FLOW_PATH)
        return response

    async def _failed(
        self, request: Request, peer: str, reason: str, message: str, status: int = 400
    ) -> Response:
        log.warning("console sign-in failed: peer=%s reason=%s", peer or "-", reason)
        with contextlib.suppress(StoreUnavailable):  # the page still says what happened
            await self._audit.failed(AdminDeps.of(request.scope), peer, reason)
        return self._failed_page(request, message, status)

    def _failed_page(self, request: Request, message: str, status: int) -> Response:
        context = {
            "error": message,
            "retry": f"{FLOW_PATH}/login?next={quote(f'{BASE}/')}",
            "now": time.time(),
        }
        response = self._console.render(request, "signin_failed.html", context, status=status)
        response.delete_cookie(FLOW_COOKIE, path=FLOW_PATH)
        return response
