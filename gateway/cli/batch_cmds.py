"""`sluicegate batches list|show|cancel`: a team's batches through the admin API."""

from __future__ import annotations

import argparse
import json
from typing import Any

from gateway.cli import render
from gateway.cli.client import AdminClient, quoted

BATCH_COLUMNS = ("id", "status", "endpoint", "model", "progress", "failed", "created")


def progress(batch: dict[str, Any]) -> str:
    counts = batch.get("request_counts") or {}
    return f"{counts.get('completed', 0) + counts.get('failed', 0)}/{counts.get('total', 0)}"


def _row(batch: dict[str, Any]) -> dict[str, Any]:
    counts = batch.get("request_counts") or {}
    return {
        **batch,
        "progress": progress(batch),
        "failed": counts.get("failed", 0),
        "created": render.when(batch.get("created_at")),
    }


def cmd_batches(args: argparse.Namespace) -> int:
    client = AdminClient.from_env()
    if args.action == "list":
        listed = client.call("GET", "/admin/v1/batches", team=args.team)
        if args.json:
            print(json.dumps(listed["data"]))
        else:
            print(render.table([_row(b) for b in listed["data"]], BATCH_COLUMNS))
            print(f"lines queued: {listed['queued_lines']}, running: {listed['running_lines']}")
        return 0
    path = f"/admin/v1/batches/{quoted(args.batch_id)}"
    if args.action == "cancel":
        batch = client.call("POST", path + "/cancel", team=args.team)
        print(f"batch {batch['id']}: {batch['status']} ({progress(batch)} lines done)")
        return 0
    batch = client.call("GET", path, team=args.team)
    if args.json:
        print(json.dumps(batch))
    else:
        row = _row(batch)
        fields = (*BATCH_COLUMNS, "input_file_id", "output_file_id", "error_file_id", "expires_at")
        print(render.record({name: row.get(name) for name in fields}))
    return 0
