"""`sluicegate whoami` and `sluicegate roles ...`: who the CLI acts as, and who holds which role."""

from __future__ import annotations

import argparse
import json

from gateway.cli import render
from gateway.cli.client import AdminClient, quoted
from gateway.identity.principal import describe

BINDING_COLUMNS = ("id", "subject", "role", "team", "active", "created", "created_by")


def cmd_whoami(args: argparse.Namespace) -> int:
    me = AdminClient.from_env().call("GET", "/admin/v1/me")
    if args.json:
        print(json.dumps(me))
        return 0
    fields = {k: me.get(k) for k in ("kind", "subject", "email", "name", "issuer", "client_id")}
    fields["groups"] = ", ".join(me.get("groups") or []) or None
    roles = [
        f"{r['role']}" + (f" on {r['team']}" if r.get("team") else "") + f" (via {r['via']})"
        for r in me["roles"]
    ]
    fields["roles"] = "; ".join(roles) or "none: ask a platform admin for a role binding"
    print(render.record(fields))
    return 0


def _row(binding: dict[str, object]) -> dict[str, object]:
    subject = f"group:{binding['group']}" if "group" in binding else f"user:{binding.get('user')}"
    created_by = binding.get("created_by")
    return {
        **binding,
        "subject": subject,
        "active": "yes" if binding.get("active") else "no (team re-created)",
        "created": render.when(binding.get("created_at")),  # type: ignore[arg-type]
        "created_by": describe(created_by if isinstance(created_by, dict) else None),
    }


def cmd_roles(args: argparse.Namespace) -> int:
    client = AdminClient.from_env()
    if args.action == "bind":
        body: dict[str, object] = {"role": args.role}
        body["group" if args.group is not None else "user"] = (
            args.group if args.group is not None else args.user
        )
        if args.team:
            body["team"] = args.team
        binding = client.call("POST", "/admin/v1/role-bindings", body)
        on = f" on team {binding['team']}" if binding.get("team") else ""
        print(f"bound {args.role}{on} to {_row(binding)['subject']}: {binding['id']}")
    elif args.action == "unbind":
        client.call("DELETE", f"/admin/v1/role-bindings/{quoted(args.id)}")
        print(f"unbound {args.id}")
    else:
        bindings = client.call("GET", "/admin/v1/role-bindings", team=args.team, role=args.role)["data"]
        if args.json:
            print(json.dumps(bindings))
        else:
            print(render.table([_row(b) for b in bindings], BINDING_COLUMNS))
    return 0
