"""Console sign-in sessions, kept server-side in Redis.

    cookie  sg_console = v2.<session id>.<HMAC-SHA256 of "v2.<id>", base64url>
    Redis   sg:console:session:<id> = {"principal": who signed in, "expires_at"}, with that TTL
    csrf    HMAC-SHA256("csrf|" + session id), base64url: a hidden field in every form (and the
            X-CSRF-Token header htmx sends); a POST without the right one changes nothing.

The id is random; the cookie's signature lets a replica refuse a forged cookie without asking
Redis. The signing key derives from SLUICEGATE_SESSION_SECRET, or a secret minted once into Redis
(gateway/redis/shared_secret.py), so a setup with OIDC and no admin token works. A session ends at
sign-out (its record is deleted: every replica refuses the cookie at the next request), at its
expiry, and when its person is deactivated. What a person may do is never stored here: their
roles are read from the bindings on every request (gateway/admin/access.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
import time
from dataclasses import dataclass
from typing import Protocol

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.networks import Networks
from gateway.identity.principal import Principal
from gateway.redis.shared_secret import SharedSecret

COOKIE = "sg_console"
COOKIE_PATH = "/admin/ui"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
_VERSION = "v2"
# A label per use of the secret, so a console signature can never pass for anything else.
_KEY_LABEL = b"sluicegate console session key v2"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass(frozen=True, slots=True)
class Session:
    id: str
    expires_at: float
    csrf: str
    principal: Principal
    # What the sign-in was bound to: the admin token's fingerprint for a break-glass session
    # (gateway/admin/access.py: a new token ends those sessions); empty for a person's.
    bound_to: str = ""


class SessionRecords(Protocol):
    """Where sessions are kept (gateway/console/console_store.py); each raises StoreUnavailable."""

    async def put_session(self, session_id: str, record: bytes, ttl_s: int) -> None: ...

    async def get_session(self, session_id: str) -> bytes | None: ...

    async def delete_session(self, session_id: str) -> None: ...


class Sessions:
    def __init__(
        self,
        store: SessionRecords,
        secret: SharedSecret,
        *,
        ttl_s: float,
        trusted: Networks = (),
        public_https: bool = False,
    ) -> None:
        self._store = store
        self._secret = secret
        self._ttl_s = ttl_s
        self._trusted = trusted
        # SLUICEGATE_PUBLIC_URL is https: people reach the console over TLS even where it ends
        # at an ingress this gateway does not trust to say so.
        self._public_https = public_https
        self._key: bytes | None = None

    async def _sign(self, text: str) -> str:
        if self._key is None:
            self._key = hmac.new(await self._secret.get(), _KEY_LABEL, hashlib.sha256).digest()
        return _b64(hmac.new(self._key, text.encode(), hashlib.sha256).digest())

    async def new(self, principal: Principal, *, bound_to: str = "") -> tuple[Session, str]:
        """A new session for `principal`, stored; and its cookie value."""
        session_id = secrets.token_urlsafe(18)
        expires_at = float(int(time.time() + self._ttl_s))
        record = orjson.dumps(
            {"principal": principal.record(), "expires_at": expires_at, "bound_to": bound_to}
        )
        await self._store.put_session(session_id, record, max(int(self._ttl_s) + 1, 1))
        payload = f"{_VERSION}.{session_id}"
        csrf = await self._sign(f"csrf|{session_id}")
        session = Session(session_id, expires_at, csrf, principal, bound_to)
        return session, f"{payload}.{await self._sign(payload)}"

    async def read(self, request: Request) -> Session | None:
        """The request's session: None when there is no cookie, or it is forged, expired or ended."""
        raw = request.cookies.get(COOKIE)
        # ASCII only: hmac.compare_digest refuses other str (a TypeError, a 500).
        if not raw or len(raw) > 200 or not raw.isascii():
            return None
        parts = raw.split(".")
        if len(parts) != 3 or parts[0] != _VERSION:
            return None
        if not hmac.compare_digest(await self._sign(f"{parts[0]}.{parts[1]}"), parts[2]):
            return None
        stored = await self._store.get_session(parts[1])
        if stored is None:
            return None
        record = orjson.loads(stored)
        if record["expires_at"] <= time.time():
            return None
        principal = Principal.from_record(record["principal"])
        csrf = await self._sign(f"csrf|{parts[1]}")
        return Session(parts[1], record["expires_at"], csrf, principal, record.get("bound_to", ""))

    async def end(self, session: Session) -> None:
        await self._store.delete_session(session.id)

    def csrf_ok(self, session: Session, given: str | None) -> bool:
        return (
            given is not None
            and given.isascii()
            and hmac.compare_digest(session.csrf.encode(), given.encode())
        )

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
        """https to the gateway, to the public URL, or to a trusted proxy that says so in
        X-Forwarded-Proto."""
        if request.url.scheme == "https" or self._public_https:
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
