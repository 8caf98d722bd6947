"""What the admin API needs, and nothing more: built once in the app's lifespan."""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.types import Scope

from gateway.admin.access import AdminAccess
from gateway.admin.audit import AuditLog
from gateway.admin.throttle import AdminThrottle
from gateway.config import Settings
from gateway.console.session import Sessions
from gateway.http.networks import trusted_networks
from gateway.identity.binding_store import BindingStore
from gateway.identity.directory import Directory
from gateway.identity.oidc import JwksCache
from gateway.identity.tokens import TokenVerifier
from gateway.keys.auth import Authenticator
from gateway.keys.service import KeyChanges
from gateway.keys.store import KeyStore
from gateway.metering.meter import Meter
from gateway.routing.router import Router
from gateway.state import app_state


@dataclass(frozen=True, slots=True)
class AdminDeps:
    settings: Settings
    keystore: KeyStore
    auth: Authenticator  # its cache forgets a changed key at once (through `keys`)
    meter: Meter  # usage reports
    router: Router  # models, pools and endpoints
    audit: AuditLog  # every change written down, as a step of the change (gateway/keys/steps.py)
    bindings: BindingStore  # who holds which role (gateway/identity/binding_store.py)
    sessions: Sessions  # the console's sign-ins (gateway/console/session.py)
    # The SCIM directory: who is still active, and their groups (gateway/identity/directory.py).
    directory: Directory
    # Failed admin-token attempts per client address: one per app, so built here from the settings.
    throttle: AdminThrottle = field(init=False)
    # Who is calling and what they may do: the admin token, or an IdP's access token (one JWKS
    # cache per app).
    access: AdminAccess = field(init=False)
    # The changes a cached key must not outlive, for the admin API and the console alike.
    keys: KeyChanges = field(init=False)

    def __post_init__(self) -> None:
        settings = self.settings
        throttle = AdminThrottle(
            trusted_networks(settings.trusted_proxies), max_failures=settings.admin_max_failures
        )
        verifier = None
        if settings.oidc is not None:
            jwks = JwksCache(settings.oidc.issuer, min_refetch_s=settings.oidc.jwks_min_refetch_s)
            verifier = TokenVerifier(settings.oidc, jwks)
        access = AdminAccess(
            admin_token=settings.admin_token,
            oidc=settings.oidc,
            verifier=verifier,
            bindings=self.bindings,
            directory=self.directory,
            keystore=self.keystore,
            throttle=throttle,
        )
        object.__setattr__(self, "throttle", throttle)
        object.__setattr__(self, "access", access)
        object.__setattr__(self, "keys", KeyChanges(self.keystore, self.auth.forget))

    @staticmethod
    def of(scope: Scope) -> AdminDeps:
        return app_state(scope)["admin"]
