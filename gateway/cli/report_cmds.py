"""`sluicegate usage` and `sluicegate audit`: reading what happened."""

from __future__ import annotations

import argparse
import json
import sys

from gateway.cli import render
from gateway.cli.client import AdminClient
from gateway.identity.principal import describe
from gateway.metering import usage_report


def cmd_usage(args: argparse.Namespace) -> int:
    client = AdminClient.from_env()
    query = {
        "team": args.team,
        "since": args.since,
        "until": args.until,
        "model": args.model,
        "key": args.key,
        "group_by": args.group_by,
    }
    if args.csv:
        print(client.call("GET", "/admin/v1/usage", format="csv", **query), end="")
        return 0
    result = client.call("GET", "/admin/v1/usage", **query)
    if args.json:
        print(json.dumps(result["data"]))
        return 0
    # The CSV's columns, in its order, and a totals row under them.
    total = {**result["totals"], "team": "TOTAL"}
    print(render.table([*result["data"], total], usage_report.COLUMNS))
    if result.get("budgets"):  # a named team's money budgets (gateway/metering/money_budgets.py)
        print()
        print(render.table(result["budgets"], BUDGET_COLUMNS))
    return 0


BUDGET_COLUMNS = (
    "owner",
    "key_id",
    "period",
    "budget",
    "spent",
    "remaining",
    "forecast",
    "currency",
    "ends_at",
)


def cmd_audit(args: argparse.Namespace) -> int:
    client = AdminClient.from_env()
    result = client.call(
        "GET", "/admin/v1/audit", team=args.team, since=args.since, before=args.before, limit=args.limit
    )
    entries = result["data"]
    if args.json:
        print(json.dumps(entries))
    else:
        rows = [
            {
                **entry,
                "actor": describe(entry.get("actor")),
                "changes": ", ".join(
                    f"{name}: {render.change(name, old)} -> {render.change(name, new)}"
                    for name, (old, new) in entry["changes"].items()
                ),
            }
            for entry in entries
        ]
        print(render.table(rows, ["time", "actor", "action", "team", "key_id", "changes", "peer"]))
    if result.get("has_more") and entries:
        print(f"# older entries remain: sluicegate audit --before {entries[-1]['id']}", file=sys.stderr)
    return 0
