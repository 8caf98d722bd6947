"""Who is calling the admin API, and what they may do: the first step of every admin route.

    Authorization: Bearer <SLUICEGATE_ADMIN_TOKEN>   the break-glass token: platform-admin
    Authorization: Bearer <JWT>                      an IdP access token (gateway/identity/tokens.py):
                                                     a person or a service, whose roles come from
                                                     the role bindings and the bootstrap groups

A bearer shaped like a JWT is checked as one and never counted as a wrong admin-token guess (a
person's expired token must not lock their office's address out); anything else is compared with
the admin token in constant time, and an address that keeps guessing is throttled
(gateway/admin/throttle.py). Roles are read from Redis on every call, so a removed binding takes
effect on every replica at once. So is a person's standing in the SCIM directory
(gateway/identity/directory.py): deactivated or deleted there, they are refused even with a
still-valid IdP token; their SCIM groups join their token's groups. Tokens never reach a log:
only why one was refused.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NoReturn

from starlette.requests import Request
from starlette.types import Scope

from gateway.admin.throttle import AdminThrottle
from gateway.errors import ErrorCode, GatewayError
from gateway.identity.binding_store import BindingStore
from gateway.identity.bindings import RoleBinding, grants
from gateway.identity.directory import Directory
from gateway.identity.oidc import OidcSettings
from gateway.identity.principal import BREAK_GLASS, Kind, Principal
from gateway.identity.roles import ACTIONS, Action, Grant, Permissions, Role
from gateway.identity.tokens import TokenRejected, TokenVerifier, looks_like_jwt
from gateway.keys.auth import bearer_token
from gateway.keys.store import KeyStore
from gateway.observability.logs import loggable

log = logging.getLogger("sluicegate.admin")
_SCOPE_KEY = "sluicegate.admin_caller"
_BREAK_GLASS_PERMISSIONS = Permissions([Grant(Role.PLATFORM_ADMIN, None, "admin-token")])


@dataclass(frozen=True, slots=True)
class Caller:
    principal: Principal
    permissions: Permissions
    peer: str  # the address the throttle counts, which the audit log records beside the actor

    def require(self, action: Action, team: str | None = None) -> None:
        self.permissions.require(action, team)

    def teams(self, action: Action) -> frozenset[str] | None:
        return self.permissions.teams(action)

    @staticmethod
    def of(scope: Scope) -> Caller:
        caller: Caller = scope[_SCOPE_KEY]
        return caller

    def attach(self, scope: Scope) -> None:
        scope[_SCOPE_KEY] = self


class AdminAccess:
    def __init__(
        self,
        *,
        admin_token: str | None,
        oidc: OidcSettings | None,
        verifier: TokenVerifier | None,
        bindings: BindingStore,
        keystore: KeyStore,
        throttle: AdminThrottle,
        directory: Directory | None = None,
    ) -> None:
        self._admin_digest = _digest(admin_token) if admin_token else None
        self._oidc = oidc
        self.verifier = verifier  # the console's sign-in checks ID tokens with it too (console/sso.py)
        self._bindings = bindings
        self._directory = directory or Directory(None)
        self._keystore = keystore
        self.throttle = throttle

    @property
    def enabled(self) -> bool:
        return self._admin_digest is not None or self.verifier is not None

    async def caller(self, request: Request) -> Caller:
        """The caller, or a 401/429 (no or a bad credential) or 403 (admin plane disabled)."""
        if not self.enabled:
            raise GatewayError(
                ErrorCode.ADMIN_DISABLED,
                "The admin API is disabled: start the gateway with SLUICEGATE_OIDC_ISSUER or "
                "SLUICEGATE_ADMIN_TOKEN set.",
            )
        given = bearer_token(request.headers) or ""
        peer = self.throttle.address(request.scope)
        if self._admin_digest is not None and hmac.compare_digest(_digest(given), self._admin_digest):
            return Caller(BREAK_GLASS, _BREAK_GLASS_PERMISSIONS, peer)
        if self.verifier is not None and looks_like_jwt(given):
            try:
                principal = await self.verifier.verify(given)
            except TokenRejected as exc:
                log.warning(
                    "admin access token refused: peer=%s path=%s reason=%s",
                    loggable(peer or "-"),
                    loggable(request.url.path),
                    exc.reason,
                )
                raise
            principal = await self.in_directory(principal)
            return Caller(principal, await self.permissions(principal), peer)
        self._wrong_admin_token(request, peer, presented=bool(given))

    async def in_directory(self, principal: Principal) -> Principal:
        """`principal` with their SCIM groups added; a 401 when the directory deactivated or
        deleted them (their IdP token may still be valid for an hour)."""
        standing = await self._directory.standing(principal)
        if standing.active is False:
            raise GatewayError(
                ErrorCode.ADMIN_UNAUTHORIZED,
                "Your account is deactivated in the company directory (SCIM): ask your IdP's "
                "administrator to reactivate it.",
            )
        if not standing.groups:
            return principal
        return dataclasses.replace(principal, directory_groups=frozenset(standing.groups))

    @property
    def token_fingerprint(self) -> str:
        """What a break-glass console session is bound to: a new admin token ends those sessions."""
        return self._admin_digest.hex()[:16] if self._admin_digest is not None else ""

    async def caller_for(self, principal: Principal, peer: str, *, bound_to: str = "") -> Caller | None:
        """The caller a console session holds, as of now: None when it may no longer act (the
        admin token it signed in with changed, OIDC is off, the person was deactivated or deleted
        in the SCIM directory, which is read on every request as for the admin API)."""
        if principal.kind is Kind.TOKEN:
            if not self.token_fingerprint or not hmac.compare_digest(bound_to, self.token_fingerprint):
                return None
            return Caller(BREAK_GLASS, _BREAK_GLASS_PERMISSIONS, peer)
        if self.verifier is None or principal.kind is not Kind.PERSON:
            return None
        try:
            principal = await self.in_directory(principal)
        except GatewayError:
            return None
        return Caller(principal, await self.permissions(principal), peer)

    async def permissions(self, principal: Principal) -> Permissions:
        assert self._oidc is not None  # only IdP principals have bindings
        bindings = await self._bindings.all()
        team_ids = await bound_team_ids(self._keystore, [b for b in bindings if b.matches(principal)])
        return Permissions(grants(principal, bindings, team_ids, self._oidc.platform_admin_groups))

    def _wrong_admin_token(self, request: Request, peer: str, *, presented: bool) -> NoReturn:
        retry_after = self.throttle.retry_after(peer)
        if retry_after is not None:
            # Neither counted nor logged: a locked-out guesser adds no log noise.
            raise GatewayError(
                ErrorCode.ADMIN_THROTTLED,
                f"Too many wrong admin tokens from this address; try again in {retry_after} s.",
                headers={"retry-after": str(retry_after)},
            )
        self.throttle.failed(peer)
        # Never the presented value: it may be the real token with a typo.
        log.warning(
            "admin token rejected: peer=%s path=%s presented=%s",
            loggable(peer or "-"),
            loggable(request.url.path),
            "yes" if presented else "no",
        )
        raise GatewayError(ErrorCode.ADMIN_UNAUTHORIZED, "Missing or wrong admin token.")


async def bound_team_ids(keystore: KeyStore, bindings: Iterable[RoleBinding]) -> dict[str, str]:
    """The current id of each team the bindings name (a deleted team has none): what
    RoleBinding.active checks a team role against."""
    teams = sorted({b.team for b in bindings if b.team is not None})
    infos = await asyncio.gather(*(keystore.team_info(t) for t in teams))
    return {t: info.id for t, info in zip(teams, infos, strict=True) if info is not None}


def require_some_role(caller: Caller, action: Action | None) -> None:
    """Before a handler: a caller with no role at all is refused everywhere but `/me` (action
    None), and a platform-wide action (no team role allows it) is refused before anything is read.
    An action on one team is checked by its handler, which knows the team and names it."""
    if action is None:
        return
    if caller.permissions.empty:
        raise GatewayError(
            ErrorCode.FORBIDDEN,
            "You are signed in, but no role is bound to you or your groups: ask a platform admin "
            "for one (GET /admin/v1/me shows what the gateway sees).",
        )
    if not ACTIONS[action][0]:
        caller.require(action, None)


def _digest(token: str) -> bytes:
    # Digests of both sides, so not even the token's length shows in the comparison's time.
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
