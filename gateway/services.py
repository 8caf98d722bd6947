"""Everything a request needs, built once per app in its lifespan and passed explicitly."""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from gateway.auth import Authenticator
from gateway.config import Settings
from gateway.keystore import KeyStore
from gateway.metering import Meter
from gateway.metrics import Metrics
from gateway.ratelimit import RateLimiter
from gateway.routing.router import Router
from gateway.upstream import Upstream


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    redis: Redis
    router: Router
    keystore: KeyStore
    auth: Authenticator
    limiter: RateLimiter
    meter: Meter
    metrics: Metrics
    upstream: Upstream
