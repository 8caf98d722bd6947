"""An IdP's access token, checked as RFC 9068 says, into the Principal it names.

    header   `typ` is at+jwt (an ID token, typ JWT, is never an admin credential); `alg` is one of
             ALGORITHMS, asymmetric only (never `none`, never HMAC: RFC 8725 §3.1-3.2); the `kid`
             picks the issuer's key (oidc.JwksCache)
    claims   `iss` is ours; `aud` is ours, and when it names several audiences `azp` or
             `client_id` must be one of our clients; `exp` is required, and `exp`, `nbf` and `iat`
             hold within LEEWAY_S; the subject claim is present

joserfc checks signatures and the registered claims; this module adds what it leaves to the
caller (typ, azp, shapes and sizes of the claims it reads). Every failure is the same 401 to the
caller, `TokenRejected(reason)`: the reason is for the log, never the token.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Callable
from typing import Any

import orjson
from joserfc import jwt
from joserfc.errors import JoseError

from gateway.errors import ErrorCode, GatewayError
from gateway.identity.oidc import Discovery, JwksCache, OidcSettings
from gateway.identity.principal import Kind, Principal

ALGORITHMS = ("RS256", "PS256", "ES256")
LEEWAY_S = 30
MAX_TOKEN_CHARS = 16 * 1024
MAX_GROUPS = 1000
_MAX_CLAIM_CHARS = 512
_TYPES = ("at+jwt", "application/at+jwt")
_ID_TOKEN_TYPES = ("jwt", "")  # an ID token: typ JWT, or none at all


class TokenRejected(GatewayError):
    def __init__(self, reason: str) -> None:
        super().__init__(ErrorCode.ADMIN_UNAUTHORIZED, "The access token is not valid for this gateway.")
        self.reason = reason


def looks_like_jwt(token: str) -> bool:
    """Three dot-separated parts whose first is a JSON object with an `alg`: a JWS, not a guess
    at the admin token (which the admin API throttles as such)."""
    if len(token) > MAX_TOKEN_CHARS or token.count(".") != 2:
        return False
    header = _segment(token.split(".", 1)[0])
    return isinstance(header, dict) and "alg" in header


def _segment(text: str) -> Any:
    try:
        return orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        return None


class TokenVerifier:
    def __init__(
        self, settings: OidcSettings, jwks: JwksCache, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._settings = settings
        self._jwks = jwks
        self._clock = clock
        self._registry = jwt.JWTClaimsRegistry(
            now=lambda: int(self._clock()),
            leeway=LEEWAY_S,
            iss={"essential": True, "value": settings.issuer},
            aud={"essential": True, "value": settings.audience},
            exp={"essential": True},
        )

    @property
    def discovery(self) -> Discovery:
        return self._jwks.discovery

    @property
    def settings(self) -> OidcSettings:
        return self._settings

    async def verify(self, token: str) -> Principal:
        """An access token for the admin API (RFC 9068)."""
        claims = await self._claims(token, _TYPES, self._registry)
        self._check_parties(claims)
        return self._principal(claims)

    async def verify_id_token(self, token: str, *, client_id: str, nonce: str) -> Principal:
        """The ID token of a console sign-in (OIDC Core §3.1.3.7): signed by the issuer, `typ`
        JWT or none, its audience the console's client (and `azp` that client when it names
        several), and the `nonce` the sign-in sent, which binds it to this sign-in."""
        registry = jwt.JWTClaimsRegistry(
            now=lambda: int(self._clock()),
            leeway=LEEWAY_S,
            iss={"essential": True, "value": self._settings.issuer},
            aud={"essential": True, "value": client_id},
            exp={"essential": True},
            nonce={"essential": True, "value": nonce},
        )
        claims = await self._claims(token, _ID_TOKEN_TYPES, registry)
        aud = claims.get("aud")
        if isinstance(aud, list) and len(aud) > 1 and claims.get("azp") != client_id:
            raise TokenRejected("several audiences and azp is not the console")
        return self._principal(claims)

    async def _claims(
        self, token: str, types: tuple[str, ...], registry: jwt.JWTClaimsRegistry
    ) -> dict[str, Any]:
        header = _segment(token.split(".", 1)[0]) if looks_like_jwt(token) else None
        if not isinstance(header, dict):
            raise TokenRejected("not a JWT")
        if str(header.get("typ", "")).lower() not in types:
            raise TokenRejected("wrong typ")
        if header.get("alg") not in ALGORITHMS:
            raise TokenRejected("algorithm not allowed")
        kid = header.get("kid")
        keys = await self._jwks.keys(kid if isinstance(kid, str) else None)
        try:
            decoded = jwt.decode(token, keys, algorithms=list(ALGORITHMS))
            claims = decoded.claims
            registry.validate(claims)
        except JoseError as exc:
            raise TokenRejected(type(exc).__name__) from None
        except (ValueError, TypeError):  # a malformed payload the library did not wrap
            raise TokenRejected("malformed") from None
        return claims

    def _check_parties(self, claims: dict[str, Any]) -> None:
        aud = claims.get("aud")
        if isinstance(aud, list) and len(aud) > 1:
            party = claims.get("azp", claims.get("client_id"))
            allowed = self._settings.clients | {self._settings.audience}
            if party not in allowed:
                raise TokenRejected("several audiences and no azp/client_id of ours")

    def _principal(self, claims: dict[str, Any]) -> Principal:
        subject = _text(claims.get(self._settings.subject_claim))
        if subject is None:
            raise TokenRejected("no subject")
        client_id = _text(claims.get("client_id", claims.get("azp")))
        issuer = self._settings.issuer
        # RFC 9068 §2.2: a client-credentials token's subject is the client itself; Entra ID marks
        # an app-only token with idtyp=app.
        if claims.get("idtyp") == "app" or (client_id is not None and claims.get("sub") == client_id):
            return Principal(Kind.SERVICE, subject=subject, issuer=issuer, client_id=client_id)
        verified = claims.get("email_verified") is True or claims.get("email_verified") == "true"
        email = _text(claims.get("email")) if verified else None
        return Principal(
            Kind.PERSON,
            subject=subject,
            issuer=issuer,
            email=email.lower() if email else None,
            name=_text(claims.get("name")),
            client_id=client_id,
            groups=_groups(claims.get(self._settings.groups_claim)),
        )


def _text(value: Any) -> str | None:
    if isinstance(value, str) and 0 < len(value) <= _MAX_CLAIM_CHARS:
        return value
    return None


def _groups(value: Any) -> frozenset[str]:
    """The groups claim: a list of strings, or one string (Kubernetes accepts both)."""
    if value is None:
        return frozenset()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise TokenRejected("groups claim is not a list")
    if len(items) > MAX_GROUPS:
        raise TokenRejected("too many groups")
    return frozenset(g for g in items if isinstance(g, str) and 0 < len(g) <= _MAX_CLAIM_CHARS)
