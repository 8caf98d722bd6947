"""`sluicegate pools`: each model's pools and endpoints as one replica sees them (GET /admin/v1/models).

Health, in-flight counts and queues are per replica: the answer names the replica that gave it, and
behind a Service each call may reach another one.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from gateway.cli import render
from gateway.cli.client import AdminClient

COLUMNS = ["model", "pool", "endpoint", "state", "inflight", "load", "queue", "why"]


def cmd_pools(args: argparse.Namespace) -> int:
    answer = AdminClient.from_env().call("GET", "/admin/v1/models")
    models = [m for m in answer["data"] if args.model is None or m["name"] == args.model]
    if args.json:
        print(json.dumps({"replica": answer.get("replica"), "data": models}))
        return 0
    print(f"as replica {render.cell(answer.get('replica'))} sees them (each replica keeps its own)")
    print(render.table([row for model in models for row in _rows(model)], COLUMNS))
    return 0


def _rows(model: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for pool in model["pools"]:
        queue = pool["queue"]["depth"]
        endpoints = pool["endpoints"] or [None]  # a pool with no endpoint yet still shows
        for endpoint in endpoints:
            row: dict[str, Any] = {"model": model["name"], "pool": pool["name"], "queue": queue}
            if endpoint is not None:
                row |= {
                    "endpoint": endpoint["url"],
                    "state": endpoint["state"],
                    "inflight": f"{endpoint['inflight']}/{pool['max_inflight_per_endpoint']}",
                    "load": _load(endpoint["load"]),
                    "why": _why(endpoint),
                }
            rows.append(row)
    return rows


def _load(load: dict[str, Any] | None) -> str | None:
    """The worker's own numbers, as last scraped (None: never scraped, or the scrape went stale)."""
    if load is None:
        return None
    return (
        f"running={load['running']} waiting={load['waiting']} "
        f"kv={load['kv_cache_usage']:.0%} ({load['age_s']:.0f}s ago)"
    )


def _why(endpoint: dict[str, Any]) -> str | None:
    state = endpoint["state"]
    if state == "ejected":
        return f"{endpoint.get('ejected_because') or 'ejected'}; until {endpoint.get('ejected_until')}"
    if state == "unhealthy":
        return "its /health probe fails"
    if state == "pending":
        return "not yet confirmed to serve the model"
    if state == "removed":
        return "gone from discovery; its in-flight requests finish"
    return None
