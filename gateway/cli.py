"""`sluicegate`: serve, demo, check-config, and admin commands over the admin API.

Admin commands talk HTTP to a running gateway (SLUICEGATE_URL, SLUICEGATE_ADMIN_TOKEN), so they
work the same against a laptop demo and a cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from gateway.config import ConfigError, ModelTable, Settings, load_model_table

DEFAULT_URL = "http://127.0.0.1:8080"


class CliError(Exception):
    pass


def load_table(settings: Settings, path: str | None = None) -> ModelTable:
    path = path or settings.config_path
    if not path:
        raise ConfigError("SLUICEGATE_CONFIG: set it to the path of the model table (YAML)")
    return load_model_table(path)


def cmd_serve(args: argparse.Namespace) -> int:
    from uvicorn.config import STARTUP_FAILURE

    from gateway.app import create_app
    from gateway.edge.draining import DrainingServer
    from gateway.edge.server import uvicorn_config
    from gateway.observability.logs import configure_logging

    settings = Settings.from_env()
    table = load_table(settings)
    configure_logging(settings.log_level, settings.log_format)
    app = create_app(settings, table)
    server = DrainingServer(
        uvicorn_config(app, settings),
        app.state.drain,
        shutdown_delay_s=settings.shutdown_delay_s,
        drain_timeout_s=settings.drain_timeout_s,
    )
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    # As uvicorn.run: a gateway that never started (port taken, failed startup) is a failure.
    return 0 if server.started else STARTUP_FAILURE


def cmd_check_config(args: argparse.Namespace) -> int:
    table = load_table(Settings.from_env(), args.path)
    names = ", ".join(m.name for m in table.models) or "none"
    print(f"ok: {len(table.models)} model(s): {names}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from gateway.dev.demo import run_demo

    return run_demo(host=args.host, port=args.port)


class AdminClient:
    def __init__(self, base_url: str, token: str | None) -> None:
        self._base = base_url.rstrip("/")
        self._token = token

    @classmethod
    def from_env(cls) -> AdminClient:
        return cls(os.environ.get("SLUICEGATE_URL", DEFAULT_URL), os.environ.get("SLUICEGATE_ADMIN_TOKEN"))

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, **query: Any) -> Any:
        params = {k: v for k, v in query.items() if v is not None}
        url = self._base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 -- http(s) only
        request.add_header("content-type", "application/json")
        if self._token:
            request.add_header("authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                raw = response.read()
                ctype = response.headers.get("content-type", "")
        except urllib.error.HTTPError as exc:
            with exc:
                raise CliError(_error_message(exc.code, exc.read())) from None
        except urllib.error.URLError as exc:
            raise CliError(f"cannot reach the gateway at {self._base}: {exc.reason}") from None
        return json.loads(raw) if ctype.startswith("application/json") else raw.decode()


def _error_message(status: int, body: bytes) -> str:
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = body.decode(errors="replace")[:200]
    return f"HTTP {status}: {message}"


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    cells = [[("-" if row.get(c) is None else str(row.get(c))) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


_LIMIT_FLAGS = ("rpm", "tpm", "max_concurrency", "tpm_counts", "daily_tokens", "monthly_tokens", "weight")


def _limits_of(args: argparse.Namespace) -> dict[str, Any]:
    body = {name: getattr(args, name) for name in _LIMIT_FLAGS if getattr(args, name, None) is not None}
    if getattr(args, "clear", None):
        body["clear"] = [c.replace("-", "_") for c in args.clear.split(",")]
    return body


def _add_limit_flags(parser: argparse.ArgumentParser, *, budgets: bool) -> None:
    parser.add_argument("--rpm", type=int, help="requests per minute")
    parser.add_argument("--tpm", type=int, help="tokens per minute")
    parser.add_argument(
        "--tpm-counts", choices=("total", "input", "output"), help="tokens a TPM limit counts"
    )
    parser.add_argument("--max-concurrency", type=int, help="requests in flight at once")
    if budgets:
        parser.add_argument("--daily-tokens", type=int, help="token budget per UTC day")
        parser.add_argument("--monthly-tokens", type=int, help="token budget per UTC month")
        parser.add_argument(
            "--weight", type=int, help="share of a saturated model pool relative to other teams (default 1)"
        )


def cmd_teams(args: argparse.Namespace) -> int:
    client = AdminClient.from_env()
    if args.action == "create":
        team = client.call("POST", "/admin/v1/teams", {"name": args.name, **_limits_of(args)})
        print(f"created team {team['name']}")
    elif args.action == "update":
        team = client.call("PATCH", f"/admin/v1/teams/{urllib.parse.quote(args.name)}", _limits_of(args))
        print(f"team {team['name']}: {json.dumps(team['limits'])}")
    else:
        for team in client.call("GET", "/admin/v1/teams")["data"]:
            print(team["name"])
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    client = AdminClient.from_env()
    if args.action == "create":
        body: dict[str, Any] = {"team": args.team}
        if args.name:
            body["name"] = args.name
        if args.models:
            body["models"] = [m.strip() for m in args.models.split(",") if m.strip()]
        body.update(_limits_of(args))
        if args.expires:
            body["expires_at"] = args.expires
        key = client.call("POST", "/admin/v1/keys", body)
        if args.json:
            print(json.dumps(key))
        else:
            print(key["key"])
            print(f"# id {key['id']}, team {key['team']}: the key is shown only now", file=sys.stderr)
    elif args.action == "list":
        keys = client.call("GET", "/admin/v1/keys", team=args.team)["data"]
        for key in keys:
            key["models"] = ",".join(key["models"]) if key["models"] else "*"
        print(_table(keys, ["id", "name", "models", "rpm", "revoked"]))
    elif args.action == "update":
        key = client.call("PATCH", f"/admin/v1/keys/{urllib.parse.quote(args.id)}", _limits_of(args))
        print(f"key {key['id']}: {json.dumps(key['limits'])}")
    elif args.action == "rotate":
        path = f"/admin/v1/keys/{urllib.parse.quote(args.id)}/rotate"
        key = client.call("POST", path, {"grace_seconds": args.grace})
        print(key["key"])
        print(
            f"# id {key['id']}: the new key is shown only now; the old one works for {args.grace:g} s more",
            file=sys.stderr,
        )
    else:
        key = client.call("DELETE", f"/admin/v1/keys/{urllib.parse.quote(args.id)}")
        print(f"revoked {key['id']}")
    return 0


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """'90', '30s', '10m', '1h' or '2d' as seconds."""
    unit = _DURATION_UNITS.get(text[-1:].lower())
    try:
        value = float(text[:-1] if unit else text) * (unit or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 30s, 10m, 1h, 2d)") from None
    if value < 0:
        raise argparse.ArgumentTypeError("a duration cannot be negative")
    return value


def cmd_usage(args: argparse.Namespace) -> int:
    client = AdminClient.from_env()
    fmt = "csv" if args.csv else None
    result = client.call(
        "GET", "/admin/v1/usage", team=args.team, since=args.since, until=args.until, format=fmt
    )
    if args.csv:
        print(result, end="")
    elif args.json:
        print(json.dumps(result["data"]))
    else:
        columns = ["day", "team", "key_id", "model", "requests", "prompt_tokens", "completion_tokens"]
        print(_table(result["data"], columns))
    return 0


def _printable(text: str) -> str:
    """Stored text (a key's name, a proxy's address) can hold anything: never a terminal escape."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _shown(value: Any) -> str:
    return "-" if value is None else json.dumps(value, separators=(",", ":"))


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
                "changes": ", ".join(
                    f"{name}: {_shown(old)} -> {_shown(new)}" for name, (old, new) in entry["changes"].items()
                ),
            }
            for entry in entries
        ]
        columns = ["time", "action", "team", "key_id", "changes", "peer"]
        printable = [
            {c: None if row.get(c) is None else _printable(str(row[c])) for c in columns} for row in rows
        ]
        print(_table(printable, columns))
    if result.get("has_more") and entries:
        print(f"# older entries remain: sluicegate audit --before {entries[-1]['id']}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluicegate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run the gateway (configured by SLUICEGATE_* variables)").set_defaults(
        func=cmd_serve
    )
    check = sub.add_parser("check-config", help="validate the model table and exit")
    check.add_argument("path", nargs="?", help="YAML file (default: $SLUICEGATE_CONFIG)")
    check.set_defaults(func=cmd_check_config)
    demo = sub.add_parser("demo", help="gateway + local Redis + demo worker, with a key printed")
    demo.add_argument("--host", default="127.0.0.1")
    demo.add_argument("--port", type=int, default=8080)
    demo.set_defaults(func=cmd_demo)

    teams = sub.add_parser("teams", help="manage teams").add_subparsers(dest="action", required=True)
    teams_create = teams.add_parser("create")
    teams_create.add_argument("name")
    _add_limit_flags(teams_create, budgets=True)
    teams_update = teams.add_parser("update", help="change a team's limits")
    teams_update.add_argument("name")
    _add_limit_flags(teams_update, budgets=True)
    teams_update.add_argument("--clear", help="comma-separated limits to remove, e.g. tpm,daily-tokens")
    teams.add_parser("list")
    for p in teams.choices.values():
        p.set_defaults(func=cmd_teams)

    keys = sub.add_parser("keys", help="manage API keys").add_subparsers(dest="action", required=True)
    keys_create = keys.add_parser("create")
    keys_create.add_argument("--team", required=True)
    keys_create.add_argument("--name", default="")
    keys_create.add_argument("--models", help="comma-separated model names this key may use")
    _add_limit_flags(keys_create, budgets=False)
    keys_create.add_argument("--json", action="store_true", help="print {id, key, ...} as JSON")
    keys_create.add_argument("--expires", help="when the key stops working: 2026-12-31 or an ISO time")
    keys_list = keys.add_parser("list")
    keys_list.add_argument("--team", required=True)
    keys_update = keys.add_parser("update", help="change a key's limits")
    keys_update.add_argument("id")
    _add_limit_flags(keys_update, budgets=False)
    keys_update.add_argument("--clear", help="comma-separated limits to remove, e.g. rpm,tpm")
    keys_revoke = keys.add_parser("revoke")
    keys_revoke.add_argument("id")
    keys_rotate = keys.add_parser("rotate", help="a new secret; the old one works for --grace more")
    keys_rotate.add_argument("id")
    keys_rotate.add_argument("--grace", type=duration, default=0.0, help="e.g. 30s, 10m, 1h (default 0)")
    for p in keys.choices.values():
        p.set_defaults(func=cmd_keys)

    usage = sub.add_parser("usage", help="token usage per team, key, model and day")
    usage.add_argument("--team")
    usage.add_argument("--since", help="YYYY-MM-DD (inclusive)")
    usage.add_argument("--until", help="YYYY-MM-DD (inclusive)")
    usage.add_argument("--csv", action="store_true")
    usage.add_argument("--json", action="store_true")
    usage.set_defaults(func=cmd_usage)

    audit = sub.add_parser(
        "audit",
        help="admin changes, newest first: who changed which team or key, and from where",
        description="Admin changes, newest first (teams and keys created, updated, rotated, revoked), "
        "with old -> new values and the address that asked.",
        epilog="example: sluicegate audit --team ml --since 2026-01-31 --limit 20",
    )
    audit.add_argument("--team", help="only this team's changes")
    audit.add_argument("--since", help="Unix seconds or an ISO date/time (UTC), e.g. 2026-01-31T12:00:00Z")
    audit.add_argument("--limit", type=int, help="at most this many entries, 1 to 1000 (default 100)")
    audit.add_argument("--before", help="an entry id: list what is older (the next page)")
    audit.add_argument("--json", action="store_true", help="print the entries as a JSON list")
    audit.set_defaults(func=cmd_audit)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
