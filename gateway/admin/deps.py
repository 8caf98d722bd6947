"""What the admin API needs, and nothing more: built once in the app's lifespan."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.types import Scope

from gateway.config import Settings
from gateway.keys.auth import Authenticator
from gateway.keys.store import KeyStore
from gateway.metering.meter import Meter
from gateway.routing.router import Router


@dataclass(frozen=True, slots=True)
class AdminDeps:
    settings: Settings
    keystore: KeyStore
    auth: Authenticator  # to forget cached keys at once on revoke and update
    meter: Meter  # usage reports
    router: Router  # models, pools and endpoints

    @staticmethod
    def of(scope: Scope) -> AdminDeps:
        deps: AdminDeps = scope["state"]["admin"]
        return deps
