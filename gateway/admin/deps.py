"""What the admin API needs, and nothing more: built once in the app's lifespan."""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.types import Scope

from gateway.admin.audit import AuditLog
from gateway.admin.throttle import AdminThrottle
from gateway.config import Settings
from gateway.http.networks import trusted_networks
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
    # Failed admin-token attempts per client address: one per app, so built here from the settings.
    throttle: AdminThrottle = field(init=False)
    # The changes a cached key must not outlive, for the admin API and the console alike.
    keys: KeyChanges = field(init=False)

    def __post_init__(self) -> None:
        throttle = AdminThrottle(
            trusted_networks(self.settings.trusted_proxies), max_failures=self.settings.admin_max_failures
        )
        object.__setattr__(self, "throttle", throttle)
        object.__setattr__(self, "keys", KeyChanges(self.keystore, self.auth.forget))

    @staticmethod
    def of(scope: Scope) -> AdminDeps:
        return app_state(scope)["admin"]
