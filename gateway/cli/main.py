"""The `sluicegate` command line: its parser (every subcommand with an example) and main()."""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Callable, Sequence
from typing import Any

from gateway import __version__
from gateway.cli import admin_cmds, batch_cmds, identity_cmds, pools_cmds, report_cmds, serving
from gateway.cli import login as login_cmds
from gateway.cli.client import CliError, CliUsageError
from gateway.cli.flags import add_limit_flags, day, duration
from gateway.errors import ConfigError
from gateway.metering.usage_report import GROUP_BYS

DESCRIPTION = """serve, demo, check-config, and admin commands over the admin API.

Admin commands talk HTTP to a running gateway (SLUICEGATE_URL), as you after `sluicegate login`,
or as SLUICEGATE_ADMIN_TOKEN when it is set, so they work the same against a laptop demo and a
cluster."""


def _version() -> str:
    try:
        return importlib.metadata.version("sluicegate")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return __version__


def _command(
    sub: Any, name: str, func: Callable[[argparse.Namespace], int], help_text: str, example: str
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help_text,
        description=help_text[:1].upper() + help_text[1:] + ".",
        epilog="example: " + example,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=func)
    return parser


def _group(sub: Any, name: str, help_text: str, example: str) -> Any:
    parser = sub.add_parser(
        name,
        help=help_text,
        description=help_text[:1].upper() + help_text[1:] + ".",
        epilog="example: " + example,
    )
    return parser.add_subparsers(dest="action", required=True)


def _teams(sub: Any) -> None:
    teams = _group(sub, "teams", "manage teams", "sluicegate teams show ml")
    run = admin_cmds.cmd_teams
    create = _command(
        teams, "create", run, "create a team", "sluicegate teams create ml --rpm 600 --daily-tokens 2000000"
    )
    create.add_argument("name")
    add_limit_flags(create, team=True, update=False)
    update = _command(
        teams,
        "update",
        run,
        "change a team's limits",
        "sluicegate teams update ml --tpm 100000 --clear daily-tokens",
    )
    update.add_argument("name")
    add_limit_flags(update, team=True, update=True)
    listing = _command(teams, "list", run, "list every team with its limits", "sluicegate teams list --json")
    listing.add_argument("--json", action="store_true", help="print the teams as a JSON list")
    show = _command(teams, "show", run, "show one team: limits, created, keys", "sluicegate teams show ml")
    show.add_argument("name")
    show.add_argument("--json", action="store_true", help="print the team as JSON")
    delete = _command(
        teams, "delete", run, "delete a team and revoke every key of it", "sluicegate teams delete ml --yes"
    )
    delete.add_argument("name")
    delete.add_argument(
        "--yes", action="store_true", help="required: confirms revoking every key of the team"
    )


def _keys(sub: Any) -> None:
    keys = _group(sub, "keys", "manage API keys", "sluicegate keys list --team ml --active")
    run = admin_cmds.cmd_keys
    create = _command(
        keys,
        "create",
        run,
        "create a key (its secret is printed once)",
        "sluicegate keys create --team ml --models llama-3-8b --rpm 60 --daily-tokens 500000 "
        "--expires 2026-12-31",
    )
    create.add_argument("--team", required=True)
    create.add_argument("--name", default="")
    create.add_argument(
        "--models", help="comma-separated model names this key may use (default: every model)"
    )
    add_limit_flags(create, team=False, update=False)
    create.add_argument("--json", action="store_true", help="print {id, key, ...} as JSON")
    create.add_argument("--expires", help="when the key stops working: 2026-12-31 or an ISO time")
    listing = _command(
        keys, "list", run, "list keys, every team's or one team's", "sluicegate keys list --team ml --active"
    )
    listing.add_argument("--team", help="only this team's keys")
    listing.add_argument(
        "--active", action="store_true", help="only keys that work now (not revoked or expired)"
    )
    listing.add_argument("--json", action="store_true", help="print the keys as a JSON list")
    show = _command(
        keys, "show", run, "show one key (never its secret)", "sluicegate keys show key_0123456789abcdef"
    )
    show.add_argument("id")
    show.add_argument("--json", action="store_true", help="print the key as JSON")
    update = _command(
        keys,
        "update",
        run,
        "change a key's limits, models or expiry",
        "sluicegate keys update key_0123456789abcdef --models llama-3-8b,qwen --no-expiry "
        "--model-limit qwen:rpm=5 --clear model-limits.llama-3-8b",
    )
    update.add_argument("id")
    add_limit_flags(update, team=False, update=True)
    update.add_argument("--models", help="comma-separated model names, or '*' for every model")
    expiry = update.add_mutually_exclusive_group()
    expiry.add_argument("--expires", help="a new expiry: 2026-12-31 or an ISO time")
    expiry.add_argument("--no-expiry", action="store_true", help="the key never expires")
    revoke = _command(
        keys, "revoke", run, "revoke a key at once", "sluicegate keys revoke key_0123456789abcdef"
    )
    revoke.add_argument("id")
    rotate = _command(
        keys,
        "rotate",
        run,
        "issue a new secret; the old one works for --grace more",
        "sluicegate keys rotate key_0123456789abcdef --grace 1h",
    )
    rotate.add_argument("id")
    rotate.add_argument("--grace", type=duration, default=0.0, help="e.g. 30s, 10m, 1h (default 0)")


def _reports(sub: Any) -> None:
    usage = _command(
        sub,
        "usage",
        report_cmds.cmd_usage,
        "token usage per team, key, model and day, with errors, disconnects and totals",
        "sluicegate usage --team ml --since 2026-11-01 --group-by model",
    )
    usage.set_defaults(subparser=usage)  # for its own usage line in an error
    usage.add_argument("--team", help="only this team")
    usage.add_argument("--key", help="only this key id")
    usage.add_argument("--model", help="only this model")
    usage.add_argument("--since", type=day, help="YYYY-MM-DD (inclusive)")
    usage.add_argument("--until", type=day, help="YYYY-MM-DD (inclusive)")
    usage.add_argument("--group-by", choices=GROUP_BYS, help="one row per team, key, model, api or day")
    output = usage.add_mutually_exclusive_group()
    output.add_argument("--csv", action="store_true", help="print CSV (the table's columns)")
    output.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    audit = _command(
        sub,
        "audit",
        report_cmds.cmd_audit,
        "admin changes, newest first: who (person, service or admin token) changed what, and from where",
        "sluicegate audit --team ml --since 2026-01-31 --limit 20",
    )
    audit.add_argument("--team", help="only this team's changes")
    audit.add_argument("--since", help="Unix seconds or an ISO date/time (UTC), e.g. 2026-01-31T12:00:00Z")
    audit.add_argument("--limit", type=int, help="at most this many entries, 1 to 1000 (default 100)")
    audit.add_argument("--before", help="an entry id: list what is older (the next page)")
    audit.add_argument("--json", action="store_true", help="print the entries as a JSON list")
    pools = _command(
        sub,
        "pools",
        pools_cmds.cmd_pools,
        "each model's pools and endpoints as one replica sees them: state, in-flight, load, queue, "
        "why an endpoint is out and until when",
        "sluicegate pools --model llama-3-8b",
    )
    pools.add_argument("--model", help="only this model (its name in the model table)")
    pools.add_argument("--json", action="store_true", help="print {replica, data} as JSON")


def _identity(sub: Any) -> None:
    login = _command(
        sub,
        "login",
        login_cmds.cmd_login,
        "sign in as yourself through the company's identity provider (device code, or a browser)",
        "SLUICEGATE_URL=https://llm-admin.example.com sluicegate login",
    )
    login.add_argument("--issuer", help="the IdP's issuer (default: what the gateway names)")
    login.add_argument("--client-id", help="the CLI's public client (default: what the gateway names)")
    login.add_argument("--scope", help="extra scopes, e.g. the admin API's on Entra ID (api://.../admin)")
    login.add_argument(
        "--browser", action="store_true", help="sign in in a browser on this machine instead of with a code"
    )
    _command(sub, "logout", login_cmds.cmd_logout, "forget the stored login", "sluicegate logout")
    whoami = _command(
        sub,
        "whoami",
        identity_cmds.cmd_whoami,
        "who the admin API sees: the admin token, or a person or service and their roles",
        "sluicegate whoami",
    )
    whoami.add_argument("--json", action="store_true", help="print GET /admin/v1/me as JSON")
    roles = _group(sub, "roles", "bind roles to IdP groups or users", "sluicegate roles list --team ml")
    run = identity_cmds.cmd_roles
    bind = _command(
        roles,
        "bind",
        run,
        "give a role to a group or a user (team roles need --team)",
        "sluicegate roles bind --group ml-leads --role team-admin --team ml",
    )
    who = bind.add_mutually_exclusive_group(required=True)
    who.add_argument("--group", help="a value of the IdP's groups claim, exactly")
    who.add_argument("--user", help="a subject (sub, or oid on Entra ID), or a verified email")
    bind.add_argument(
        "--role", required=True, choices=("platform-admin", "team-admin", "team-viewer", "auditor")
    )
    bind.add_argument("--team", help="the team, for team-admin and team-viewer")
    listing = _command(roles, "list", run, "list role bindings", "sluicegate roles list --role team-admin")
    listing.add_argument("--team", help="only this team's bindings")
    listing.add_argument("--role", help="only this role's bindings")
    listing.add_argument("--json", action="store_true", help="print the bindings as a JSON list")
    unbind = _command(
        roles, "unbind", run, "remove a role binding", "sluicegate roles unbind rb_0123456789abcdef"
    )
    unbind.add_argument("id")


def _batches(sub: Any) -> None:
    batches = _group(
        sub, "batches", "a team's batches (the Files and Batch API)", "sluicegate batches list --team ml"
    )
    run = batch_cmds.cmd_batches
    listing = _command(
        batches, "list", run, "list a team's batches with their progress", "sluicegate batches list --team ml"
    )
    listing.add_argument("--team", required=True)
    listing.add_argument("--json", action="store_true", help="print the batches as a JSON list")
    show = _command(batches, "show", run, "show one batch", "sluicegate batches show batch_0123 --team ml")
    show.add_argument("batch_id")
    show.add_argument("--team", required=True)
    show.add_argument("--json", action="store_true", help="print the batch as JSON")
    cancel = _command(
        batches,
        "cancel",
        run,
        "cancel a batch: no new line starts, lines in flight finish and are kept",
        "sluicegate batches cancel batch_0123 --team ml",
    )
    cancel.add_argument("batch_id")
    cancel.add_argument("--team", required=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sluicegate",
        description=DESCRIPTION,
        epilog="example: sluicegate keys create --team ml --rpm 60 (sluicegate COMMAND --help for more)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"sluicegate {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    _command(
        sub,
        "serve",
        serving.cmd_serve,
        "run the gateway (configured by SLUICEGATE_* variables)",
        "SLUICEGATE_CONFIG=models.yaml SLUICEGATE_REDIS_URL=redis://redis:6379/0 sluicegate serve",
    )
    check = _command(
        sub,
        "check-config",
        serving.cmd_check_config,
        "validate the model table and exit",
        "sluicegate check-config models.yaml",
    )
    check.add_argument("path", nargs="?", help="YAML file (default: $SLUICEGATE_CONFIG)")
    demo = _command(
        sub,
        "demo",
        serving.cmd_demo,
        "gateway + local Redis + demo worker, with a key printed",
        "sluicegate demo --port 8080",
    )
    demo.add_argument("--host", default="127.0.0.1")
    demo.add_argument("--port", type=int, default=8080)
    demo.add_argument(
        "--state",
        metavar="DIR",
        help="keep Redis's data, the admin token and the demo key in DIR across restarts",
    )
    _teams(sub)
    _keys(sub)
    _reports(sub)
    _identity(sub)
    _batches(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "usage" and args.since and args.until and args.since > args.until:
        args.subparser.error(f"--since {args.since} is after --until {args.until}")
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    except CliUsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return code
