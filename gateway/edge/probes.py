"""The operator's endpoints on both listeners (gateway/edge/planes.py): `/healthz` (the process
answers), `/readyz` (Redis and some endpoint reachable, not draining) and `/metrics`, each built by
create_app over what it reads."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.config import Settings
from gateway.drain import Drain
from gateway.errors import ErrorCode, GatewayError, StoreUnavailable
from gateway.keys.auth import bearer_token
from gateway.observability.metrics import Metrics
from gateway.routing.router import Router
from gateway.state import app_state

Endpoint = Callable[[Request], Awaitable[Response]]


def metrics_endpoint(settings: Settings, metrics: Metrics) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        # Team names and worker URLs are there: with SLUICEGATE_METRICS_TOKEN set, only for the
        # scraper that sends it (the chart's ServiceMonitor). Digests: constant time, any length.
        if settings.metrics_token is not None:
            given = hashlib.sha256((bearer_token(request.headers) or "").encode()).digest()
            if not hmac.compare_digest(given, hashlib.sha256(settings.metrics_token.encode()).digest()):
                return GatewayError(
                    ErrorCode.ADMIN_UNAUTHORIZED,
                    "/metrics wants `Authorization: Bearer <SLUICEGATE_METRICS_TOKEN>`.",
                ).response()
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return endpoint


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


def readyz(settings: Settings, drain: Drain, router: Router) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        if drain.draining:  # shutting down: out of the Service's endpoints, still serving for now
            return JSONResponse({"ready": False, "checks": {"shutdown": "draining"}}, status_code=503)
        checks: dict[str, str] = {}
        try:
            async with asyncio.timeout(settings.redis_timeout_s):
                await app_state(request.scope)["readiness"].ping()
            checks["redis"] = "ok"
        except (StoreUnavailable, TimeoutError) as exc:
            reason = exc.reason if isinstance(exc, StoreUnavailable) else type(exc).__name__
            checks["redis"] = f"unreachable ({reason})"
        checks["endpoints"] = _endpoints_check(router, settings)
        ready = all(v == "ok" for v in checks.values())
        return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)

    return endpoint


def _endpoints_check(router: Router, settings: Settings) -> str:
    """Ready when some model has a healthy endpoint, or when pools come from discovery: an empty
    discovered pool is the cluster's state (workers scaled to zero, still starting), and a gateway
    taken out of its Service for it would answer nobody, not even the 503 that tells a client to
    retry, nor queue the requests an autoscaler scales the workers up on. Only a gateway whose
    static endpoints are all down or ejected is not ready: another replica may still reach them."""
    if router.has_healthy_endpoint():
        return "ok"
    if router.has_discovered_pools() or settings.kubernetes_autodiscovery:
        return "ok"
    return "no healthy endpoint"
