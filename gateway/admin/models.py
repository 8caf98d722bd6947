"""GET /admin/v1/models: every model, its pools and their endpoints as this replica sees them.

Per endpoint: url, state (pending, healthy, ejected, unhealthy), this replica's in-flight count,
the last scraped load (running, waiting, kv_cache_usage, age in seconds; null when there is none),
consecutive failures, why it was ejected and for how long (seconds from now, and the UTC time it
ends). Per pool: the queue depth, in total and per team (counts only). The state is this replica's
alone, so the answer names it (`replica`: its host name, a pod's name in Kubernetes). Relative times
come from the monotonic routing clock, which means nothing elsewhere; `ejected_until` is wall time.
"""

from __future__ import annotations

import datetime as dt
import socket
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


def _endpoint(endpoint: Endpoint, now: float, wall: float) -> dict[str, Any]:
    load = None
    if endpoint.scraped_at is not None:
        load = {
            "running": endpoint.running,
            "waiting": endpoint.waiting,
            "kv_cache_usage": endpoint.kv_cache_usage,
            "age_s": round(now - endpoint.scraped_at, 3),
        }
    until = endpoint.ejected_until
    left = None if until is None else max(until - now, 0.0)
    return {
        "url": endpoint.url,
        "state": endpoint.state.value,
        "inflight": endpoint.inflight,
        "max_model_len": endpoint.max_model_len,  # as the worker's /v1/models reports it
        "load": load,
        "consecutive_failures": endpoint.failures,
        "ejections_in_a_row": endpoint.ejections,
        "ejected_for_s": None if left is None else round(left, 3),
        "ejected_until": None if left is None else _utc(wall + left),
        "ejected_because": endpoint.ejected_because if until is not None else None,
    }


def _utc(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _pool(pool: Pool, now: float, wall: float) -> dict[str, Any]:
    return {
        "name": pool.name,
        "weight": pool.weight,
        "policy": pool.policy_name,
        "wire_model": pool.wire_model,
        "max_inflight_per_endpoint": pool.max_inflight,
        "healthy_endpoints": pool.healthy_count(),
        "endpoints": [_endpoint(e, now, wall) for e in pool.endpoints],
        "queue": {"depth": len(pool.queue), "by_team": pool.queue.waiting_by_team()},
    }


def snapshot(router: Router) -> list[dict[str, Any]]:
    """Every model as this endpoint shows it; the web console's Models page draws the same."""
    # The routing clock is time.monotonic (gateway.routing.router's default).
    now, wall = time.monotonic(), time.time()
    return [
        {
            "name": route.model.name,
            "aliases": list(route.model.aliases),
            "fallbacks": list(route.model.fallbacks),
            "pools": [_pool(pool, now, wall) for pool in route.pools],
        }
        for route in router.models()
    ]


async def list_models(request: Request, deps: AdminDeps) -> Response:
    data = snapshot(deps.router)
    answer = {"object": "list", "replica": socket.gethostname(), "data": data}
    return Response(orjson.dumps(answer), media_type="application/json")


def admin_model_routes() -> list[Route]:
    return [Route("/admin/v1/models", guarded(list_models, Action.READ_PLATFORM), methods=["GET"])]
