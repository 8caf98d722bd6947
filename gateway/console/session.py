"""Console sign-in sessions: a cookie the gateway signs, and the CSRF token derived from it.

    cookie  sg_console = v1.<session id>.<expires, Unix s>.<HMAC-SHA256 of the rest, base64url>
    csrf    HMAC-SHA256("csrf|" + session id), base64url: a hidden field in every form (and the
            X-CSRF-Token header htmx sends); a POST without the right one changes nothing.

The signing key is derived from the admin token, not stored anywhere: every replica derives the
same key, so a session signed by one is honoured by all, and changing the token ends every
session. Sessions hold no server state; signing out records the session id in Redis until the
cookie would have expired, so a copied cookie stops working too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
import time
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from gateway.http.networks import Networks

COOKIE = "sg_console"
COOKIE_PATH = "/admin/ui"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
_VERSION = "v1"
# A label per use of the admin token, so a console signature can never pass for anything else.
_KEY_LABEL = b"sluicegate console session key v1"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass(frozen=True, slots=True)
class Session:
    id: str
    expires_at: float
    csrf: str


class Sessions:
    def __init__(self, admin_token: str, *, ttl_s: float, trusted: Networks = ()) -> None:
        self._key = hmac.new(
            admin_token.encode("utf-8", "surrogatepass"), _KEY_LABEL, hashlib.sha256
        ).digest()
        self._ttl_s = ttl_s
        self._trusted = trusted

    def _sign(self, text: str) -> str:
        return _b64(hmac.new(self._key, text.encode(), hashlib.sha256).digest())

    def _session(self, session_id: str, expires_at: float) -> Session:
        return Session(session_id, expires_at, self._sign(f"csrf|{session_id}"))

    def new(self) -> tuple[Session, str]:
        """A new session and its cookie value."""
        session_id = secrets.token_urlsafe(18)
        expires_at = float(int(time.time() + self._ttl_s))
        payload = f"{_VERSION}.{session_id}.{int(expires_at)}"
        return self._session(session_id, expires_at), f"{payload}.{self._sign(payload)}"

    def read(self, request: Request) -> Session | None:
        """The request's session: None when there is no cookie, or it is forged or expired."""
        raw = request.cookies.get(COOKIE)
        # ASCII only: hmac.compare_digest refuses other str (a TypeError, a 500), and str.isdigit
        # takes digits float() does not.
        if not raw or len(raw) > 200 or not raw.isascii():
            return None
        parts = raw.split(".")
        if len(parts) != 4 or parts[0] != _VERSION or not parts[2].isdigit():
            return None
        payload = ".".join(parts[:3])
        if not hmac.compare_digest(self._sign(payload), parts[3]):
            return None
        expires_at = float(parts[2])
        if expires_at <= time.time():
            return None
        return self._session(parts[1], expires_at)

    def csrf_ok(self, session: Session, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(session.csrf.encode(), given.encode())

    def set_cookie(self, response: Response, request: Request, value: str) -> None:
        response.set_cookie(
            COOKIE,
            value,
            max_age=int(self._ttl_s),
            path=COOKIE_PATH,
            httponly=True,
            samesite="strict",
            secure=self.over_https(request),
        )

    def clear_cookie(self, response: Response, request: Request) -> None:
        response.delete_cookie(
            COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict", secure=self.over_https(request)
        )

    def over_https(self, request: Request) -> bool:
        """https to the gateway, or to a trusted proxy that says so in X-Forwarded-Proto."""
        if request.url.scheme == "https":
            return True
        peer = request.client.host if request.client else ""
        if not self._trusted or not peer:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        if not any(address in network for network in self._trusted):
            return False
        return request.headers.get("x-forwarded-proto", "").strip().lower() == "https"
