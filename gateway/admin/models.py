"""GET /admin/v1/models: every model, its pools and their endpoints as this replica sees them.

Per endpoint: url, state (pending, healthy, ejected, unhealthy), this replica's in-flight count,
the last scraped load (running, waiting, kv_cache_usage, age in seconds; null when there is none),
consecutive failures and how long it stays ejected. Per pool: the queue depth, in total and per
team (counts only). Times are seconds relative to now: monotonic clocks mean nothing elsewhere.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.admin.deps import AdminDeps
from gateway.admin.guard import guarded
from gateway.identity.roles import Action
from gateway.routing.endpoint import Endpoint
from gateway.routing.pool import Pool
from gateway.routing.router import Router


def _endpoint(endpoint: Endpoint, now: float) -> dict[str, Any]:
    load = None
    if endpoint.scraped_at is not None:
        load = {
            "running": endpoint.running,
            "waiting": endpoint.waiting,
            "kv_cache_usage": endpoint.kv_cache_usage,
            "age_s": round(now - endpoint.scraped_at, 3),
        }
    until = endpoint.ejected_until
    return {
        "url": endpoint.url,
        "state": endpoint.state.value,
        "inflight": endpoint.inflight,
        "load": load,
        "consecutive_failures": endpoint.failures,
        "ejections_in_a_row": endpoint.ejections,
        "ejected_for_s": None if until is None else round(max(until - now, 0.0), 3),
    }


def _pool(pool: Pool, now: float) -> dict[str, Any]:
    return {
        "name": pool.name,
        "weight": pool.weight,
        "policy": pool.policy_name,
        "wire_model": pool.wire_model,
        "max_inflight_per_endpoint": pool.max_inflight,
        "healthy_endpoints": pool.healthy_count(),
        "endpoints": [_endpoint(e, now) for e in pool.endpoints],
        "queue": {"depth": len(pool.queue), "by_team": pool.queue.waiting_by_team()},
    }


def snapshot(router: Router) -> list[dict[str, Any]]:
    """Every model as this endpoint shows it; the web console's Models page draws the same."""
    # The routing clock is time.monotonic (gateway.routing.router's default).
    now = time.monotonic()
    return [
        {
            "name": route.model.name,
            "aliases": list(route.model.aliases),
            "fallbacks": list(route.model.fallbacks),
            "pools": [_pool(pool, now) for pool in route.pools],
        }
        for route in router.models()
    ]


async def list_models(request: Request, deps: AdminDeps) -> Response:
    data = snapshot(deps.router)
    return Response(orjson.dumps({"object": "list", "data": data}), media_type="application/json")


def admin_model_routes() -> list[Route]:
    return [Route("/admin/v1/models", guarded(list_models, Action.READ_PLATFORM), methods=["GET"])]
