"""`sluicegate teams ...` and `sluicegate keys ...`: each a call or two to the admin API."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gateway.cli import render
from gateway.cli.client import AdminClient, CliUsageError, quoted
from gateway.cli.flags import limits_of, models_of

KEY_COLUMNS = ("id", "team", "name", "models", "limits", "created", "expires", "revoked", "last_used")
TEAM_COLUMNS = ("name", "created", "limits")


def _team_row(team: dict[str, Any]) -> dict[str, Any]:
    return {**team, "created": render.when(team.get("created_at")), "limits": render.limits(team["limits"])}


def _key_row(key: dict[str, Any]) -> dict[str, Any]:
    return {
        **key,
        "models": ",".join(key["models"]) if key["models"] else "*",
        "limits": render.limits(key["limits"]),
        "created": render.when(key["created_at"]),
        "expires": render.when(key["expires_at"]),
        "revoked": render.when(key["revoked_at"]),
        "last_used": render.when(key.get("last_used_at")),
    }


def cmd_teams(args: argparse.Namespace) -> int:
    client = AdminClient.from_env()
    path = f"/admin/v1/teams/{quoted(args.name)}" if getattr(args, "name", None) else ""
    if args.action == "create":
        team = client.call("POST", "/admin/v1/teams", {"name": args.name, **limits_of(args)})
        print(f"created team {team['name']}")
    elif args.action == "update":
        team = client.call("PATCH", path, limits_of(args))
        print(f"team {team['name']}: {render.limits(team['limits'])}")
    elif args.action == "show":
        team = client.call("GET", path)
        if args.json:
            print(json.dumps(team))
        else:
            row = _team_row(team)
            print(render.record({c: row[c] for c in (*TEAM_COLUMNS, "keys", "active_keys")}))
    elif args.action == "delete":
        if not args.yes:
            # No prompt to answer (scripts, CI): the flag is the confirmation.
            raise CliUsageError(
                f"deleting team {args.name} revokes every key of it at once: add --yes to do it"
            )
        result = client.call("DELETE", path)
        revoked = len(result["revoked_keys"])
        print(f"deleted team {result['name']}: {revoked} key{'' if revoked == 1 else 's'} revoked")
    else:
        teams = client.call("GET", "/admin/v1/teams")["data"]
        if args.json:
            print(json.dumps(teams))
        else:
            print(render.table([_team_row(t) for t in teams], TEAM_COLUMNS))
    return 0


def _create_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"team": args.team, **limits_of(args)}
    if args.name:
        body["name"] = args.name
    if args.models:
        body["models"] = models_of(args.models)
    if args.expires:
        body["expires_at"] = args.expires
    return body


def _update_body(args: argparse.Namespace) -> dict[str, Any]:
    body = limits_of(args)
    if args.models is not None:
        body["models"] = models_of(args.models)
    if args.expires:
        body["expires_at"] = args.expires
    elif args.no_expiry:
        body["expires_at"] = None
    if not body:
        raise CliUsageError("nothing to change: give a limit, --models, --expires, --no-expiry or --clear")
    return body


def cmd_keys(args: argparse.Namespace) -> int:
    client = AdminClient.from_env()
    path = f"/admin/v1/keys/{quoted(args.id)}" if getattr(args, "id", None) else ""
    if args.action == "create":
        key = client.call("POST", "/admin/v1/keys", _create_body(args))
        if args.json:
            print(json.dumps(key))
        else:
            print(key["key"])
            print(f"# id {key['id']}, team {key['team']}: the key is shown only now", file=sys.stderr)
    elif args.action == "list":
        active = "true" if args.active else None
        keys = client.call("GET", "/admin/v1/keys", team=args.team, active=active)["data"]
        if args.json:
            print(json.dumps(keys))
        else:
            print(render.table([_key_row(k) for k in keys], KEY_COLUMNS))
    elif args.action == "show":
        key = client.call("GET", path)
        if args.json:
            print(json.dumps(key))
        else:
            row = _key_row(key)
            print(render.record({c: row[c] for c in KEY_COLUMNS}))
    elif args.action == "update":
        key = client.call("PATCH", path, _update_body(args))
        models = ",".join(key["models"]) if key["models"] else "*"
        print(
            f"key {key['id']}: models {models}; expires {render.cell(render.when(key['expires_at']))}; "
            f"limits {render.limits(key['limits'])}"
        )
    elif args.action == "rotate":
        key = client.call("POST", f"{path}/rotate", {"grace_seconds": args.grace})
        print(key["key"])
        print(
            f"# id {key['id']}: the new key is shown only now; the old one works for {args.grace:g} s more",
            file=sys.stderr,
        )
    else:
        key = client.call("DELETE", path)
        print(f"revoked {key['id']}")
    return 0
