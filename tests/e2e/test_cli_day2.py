"""The real `sluicegate` command against a real gateway for day-2 work: show and delete teams,
list every key, show and update keys (models, expiry, per-model limits, budgets), usage grouped
and totalled, and the refusals a user can act on (exit 2 for a usage mistake, 1 for a refusal)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway import __version__
from gateway.cli.render import when as render_when
from tests.conftest import FAKE_MODEL, OTHER_MODEL, Gateway
from tests.http import post
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
HI = [{"role": "user", "content": "hi"}]


def _cli(gw: Gateway | None, *args: str, token: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICEGATE_")}
    if gw is not None:
        env["SLUICEGATE_URL"] = gw.url
        if token:
            env["SLUICEGATE_ADMIN_TOKEN"] = gw.admin_token
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=30,
        check=False,
    )


def _ok(gw: Gateway, *args: str) -> str:
    done = _cli(gw, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _key(gw: Gateway, *args: str) -> dict[str, object]:
    key: dict[str, object] = json.loads(_ok(gw, "keys", "create", *args, "--json"))
    gw.secrets_created.append(str(key["key"]))
    return key


def _chat_status(gw: Gateway, secret: object, model: str = FAKE_MODEL) -> int:
    reply = post(f"{gw.url}/v1/chat/completions", {"model": model, "messages": HI}, key=str(secret))
    return reply.status


def test_version_and_an_example_in_every_help() -> None:
    assert _cli(None, "--version").stdout.strip() == f"sluicegate {__version__}"
    commands = [
        [],
        ["teams"],
        ["keys"],
        ["serve"],
        ["check-config"],
        ["demo"],
        ["usage"],
        ["audit"],
        ["pools"],
        *(["teams", c] for c in ("create", "update", "list", "show", "delete")),
        *(["keys", c] for c in ("create", "list", "show", "update", "revoke", "rotate")),
    ]
    for command in commands:
        shown = _cli(None, *command, "--help").stdout
        assert "example:" in shown, command
        assert "sluicegate" in shown.split("example:")[1], command


def test_a_missing_admin_token_says_what_to_set(gateway: Gateway) -> None:
    done = _cli(gateway, "teams", "list", token=False)
    assert done.returncode == 2
    assert "SLUICEGATE_ADMIN_TOKEN" in done.stderr


def test_teams_show_and_delete_revokes_every_key_at_once(gateway: Gateway) -> None:
    team = gateway.new_team()
    _ok(gateway, "teams", "update", team, "--rpm", "50", "--model-limit", f"{OTHER_MODEL}:rpm=5,tpm=900")
    keys = [_key(gateway, "--team", team) for _ in range(2)]
    assert all(_chat_status(gateway, k["key"]) == 200 for k in keys)
    shown = json.loads(_ok(gateway, "teams", "show", team, "--json"))
    assert shown["limits"] == {"rpm": 50, "model_limits": {OTHER_MODEL: {"rpm": 5, "tpm": 900}}}
    assert (shown["keys"], shown["active_keys"]) == (2, 2)
    table = _ok(gateway, "teams", "show", team)
    assert f"{OTHER_MODEL}:rpm=5" in table
    assert "active_keys" in table
    listed = _ok(gateway, "teams", "list")
    assert team in listed
    assert "rpm=50" in listed

    unconfirmed = _cli(gateway, "teams", "delete", team)
    assert unconfirmed.returncode == 2
    assert "--yes" in unconfirmed.stderr
    assert _chat_status(gateway, keys[0]["key"]) == 200  # nothing happened
    assert _ok(gateway, "teams", "delete", team, "--yes").strip() == f"deleted team {team}: 2 keys revoked"
    # At once: this replica forgot the secrets before it answered.
    assert [_chat_status(gateway, k["key"]) for k in keys] == [401, 401]
    gone = _cli(gateway, "teams", "show", team)
    assert gone.returncode == 1
    assert "HTTP 404" in gone.stderr


def test_keys_list_every_team_with_every_field_and_filters(gateway: Gateway) -> None:
    one, two = gateway.new_team(), gateway.new_team()
    a = _key(
        gateway,
        "--team",
        one,
        "--name",
        "a",
        "--rpm",
        "3",
        "--daily-tokens",
        "900",
        "--expires",
        "2099-01-01",
    )
    b = _key(
        gateway, "--team", two, "--models", FAKE_MODEL, "--model-limit", f"{FAKE_MODEL}:max-concurrency=2"
    )
    c = _key(gateway, "--team", two)
    _ok(gateway, "keys", "revoke", str(c["id"]))
    table = _ok(gateway, "keys", "list")
    header = ["id", "team", "name", "models", "limits", "created", "expires", "revoked", "last_used"]
    assert table.splitlines()[0].split() == header
    row_a = next(line for line in table.splitlines() if str(a["id"]) in line)
    assert "rpm=3 daily_tokens=900" in row_a
    assert "2099-01-01 00:00:00Z" in row_a
    assert f"{FAKE_MODEL}:max_concurrency=2" in table
    assert str(b["id"]) in table
    assert str(a["key"]) not in table
    listed = {k["id"]: k for k in json.loads(_ok(gateway, "keys", "list", "--json"))}
    assert {a["id"], b["id"], c["id"]} <= set(listed)
    assert listed[c["id"]]["revoked"] is True
    active = {k["id"] for k in json.loads(_ok(gateway, "keys", "list", "--team", two, "--active", "--json"))}
    assert active == {b["id"]}
    assert listed[b["id"]]["last_used_at"] is None

    # Last use is written with the request's usage, behind its answer: wait for it.
    assert _chat_status(gateway, b["key"]) == 200
    wait_until(
        lambda: gateway.admin.call("GET", f"/admin/v1/keys/{b['id']}")["last_used_at"],
        10,
        "the key's last use recorded",
    )
    used = json.loads(_ok(gateway, "keys", "show", str(b["id"]), "--json"))["last_used_at"]
    assert abs(used - time.time()) < 3600  # Redis's clock, in Unix seconds
    assert str(render_when(used)) in _ok(gateway, "keys", "list", "--team", two)


def test_keys_show_and_update_models_expiry_and_limits(gateway: Gateway) -> None:
    team = gateway.new_team()
    key = _key(gateway, "--team", team, "--models", FAKE_MODEL, "--expires", "2099-01-01")
    assert _chat_status(gateway, key["key"], OTHER_MODEL) == 403
    updated = _ok(
        gateway,
        "keys",
        "update",
        str(key["id"]),
        "--models",
        f"{FAKE_MODEL},{OTHER_MODEL}",
        "--no-expiry",
        "--monthly-tokens",
        "5000",
        "--model-limit",
        f"{OTHER_MODEL}:rpm=1",
    )
    assert "expires -" in updated
    assert _chat_status(gateway, key["key"], OTHER_MODEL) == 200  # at once
    assert _chat_status(gateway, key["key"], OTHER_MODEL) == 429  # the new per-model rpm
    shown = json.loads(_ok(gateway, "keys", "show", str(key["id"]), "--json"))
    assert shown["models"] == sorted([FAKE_MODEL, OTHER_MODEL])
    assert shown["expires_at"] is None
    assert shown["limits"] == {"monthly_tokens": 5000, "model_limits": {OTHER_MODEL: {"rpm": 1}}}
    assert "key" not in shown
    text = _ok(gateway, "keys", "show", str(key["id"]))
    assert "monthly_tokens=5000" in text
    _ok(gateway, "keys", "update", str(key["id"]), "--models", "*", "--expires", "2098-06-01")
    _ok(gateway, "keys", "update", str(key["id"]), "--clear", f"model-limits.{OTHER_MODEL},monthly-tokens")
    again = json.loads(_ok(gateway, "keys", "show", str(key["id"]), "--json"))
    assert again["limits"] == {}
    assert again["models"] is None
    assert again["expires_at"] == dt.datetime(2098, 6, 1, tzinfo=dt.UTC).timestamp()
    nothing = _cli(gateway, "keys", "update", str(key["id"]))
    assert nothing.returncode == 2
    assert "nothing to change" in nothing.stderr


def test_priority_is_set_shown_and_cleared_on_teams_and_keys(gateway: Gateway) -> None:
    team = gateway.new_team()
    _ok(gateway, "teams", "update", team, "--priority", "8")
    assert json.loads(_ok(gateway, "teams", "show", team, "--json"))["limits"]["priority"] == 8
    key = _key(gateway, "--team", team, "--priority", "3")
    assert json.loads(_ok(gateway, "keys", "show", str(key["id"]), "--json"))["limits"] == {"priority": 3}
    _ok(gateway, "keys", "update", str(key["id"]), "--clear", "priority")
    assert json.loads(_ok(gateway, "keys", "show", str(key["id"]), "--json"))["limits"] == {}
    refused = _cli(gateway, "teams", "update", team, "--priority", "10")
    assert refused.returncode != 0
    assert "'priority' must be an integer from 1 to 9" in refused.stderr


def test_default_deadline_is_set_shown_and_cleared_on_teams_and_keys(gateway: Gateway) -> None:
    team = gateway.new_team()
    _ok(gateway, "teams", "update", team, "--default-deadline-ms", "30000")
    shown = json.loads(_ok(gateway, "teams", "show", team, "--json"))["limits"]
    assert shown["default_deadline_ms"] == 30000
    key = _key(gateway, "--team", team, "--default-deadline-ms", "2000")
    shown = json.loads(_ok(gateway, "keys", "show", str(key["id"]), "--json"))["limits"]
    assert shown == {"default_deadline_ms": 2000}
    _ok(gateway, "keys", "update", str(key["id"]), "--clear", "default-deadline-ms")
    assert json.loads(_ok(gateway, "keys", "show", str(key["id"]), "--json"))["limits"] == {}
    refused = _cli(gateway, "teams", "update", team, "--default-deadline-ms", "86400001")
    assert refused.returncode != 0
    assert "'default_deadline_ms' must be a whole number of milliseconds" in refused.stderr


def test_refusals_are_clear(gateway: Gateway) -> None:
    team = gateway.new_team()
    unknown = _cli(gateway, "keys", "create", "--team", team, "--models", f"{FAKE_MODEL},no-such-model")
    assert unknown.returncode == 1
    assert "HTTP 400" in unknown.stderr
    assert "no-such-model" in unknown.stderr
    bad_limit = _cli(gateway, "keys", "create", "--team", team, "--model-limit", "no-such-model:rpm=1")
    assert "HTTP 400" in bad_limit.stderr
    key = _key(gateway, "--team", team)
    _ok(gateway, "keys", "revoke", str(key["id"]))
    revoked = _cli(gateway, "keys", "update", str(key["id"]), "--rpm", "5")
    assert revoked.returncode == 1
    assert "HTTP 409" in revoked.stderr
    assert "revoked" in revoked.stderr
    malformed = _cli(gateway, "keys", "update", str(key["id"]), "--model-limit", "llama:rpm=lots")
    assert malformed.returncode == 2
    assert "whole number" in malformed.stderr
    both = _cli(gateway, "keys", "update", str(key["id"]), "--expires", "2099-01-01", "--no-expiry")
    assert both.returncode == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--csv", "--json"], "not allowed with argument --csv"),
        (
            ["--since", "2026-03-02", "--until", "2026-03-01"],
            "--since 2026-03-02 is after --until 2026-03-01",
        ),
        (["--since", "March"], "not a date"),
        (["--group-by", "week"], "invalid choice"),
    ],
)
def test_usage_refuses_contradictory_flags(gateway: Gateway, args: list[str], message: str) -> None:
    done = _cli(gateway, "usage", *args)
    assert done.returncode == 2
    assert message in done.stderr


def test_usage_filters_groups_and_totals_with_the_csv_columns(gateway: Gateway) -> None:
    team = gateway.new_team()
    one, two = _key(gateway, "--team", team), _key(gateway, "--team", team)
    for secret, model in ((one["key"], FAKE_MODEL), (one["key"], OTHER_MODEL), (two["key"], FAKE_MODEL)):
        assert _chat_status(gateway, secret, model) == 200
    rows = list(csv.DictReader(io.StringIO(_ok(gateway, "usage", "--team", team, "--csv"))))
    assert len(rows) == 3
    header = _ok(gateway, "usage", "--team", team, "--csv").splitlines()[0].split(",")
    table = _ok(gateway, "usage", "--team", team).splitlines()
    assert table[0].split() == header  # the table's columns are the CSV's
    assert "errors" in header
    assert "disconnects" in header
    total = table[-1].split()
    assert total[0] == "TOTAL"
    assert total[:4] == ["TOTAL", "-", "-", "-"]  # team, key_id, model, day
    assert total[header.index("requests")] == "3"
    by_model = json.loads(_ok(gateway, "usage", "--team", team, "--group-by", "model", "--json"))
    assert {r["model"]: r["requests"] for r in by_model} == {FAKE_MODEL: 2, OTHER_MODEL: 1}
    assert all(r["key_id"] is None for r in by_model)
    by_key = json.loads(_ok(gateway, "usage", "--team", team, "--group-by", "key", "--json"))
    assert {r["key_id"]: r["requests"] for r in by_key} == {one["id"]: 2, two["id"]: 1}
    only = json.loads(
        _ok(gateway, "usage", "--team", team, "--key", str(one["id"]), "--model", FAKE_MODEL, "--json")
    )
    assert [(r["key_id"], r["model"], r["requests"]) for r in only] == [(one["id"], FAKE_MODEL, 1)]


def test_a_key_for_an_alias_is_stored_by_the_models_name(gateway: Gateway) -> None:
    # Requests are checked by the model's name: a key stored with the alias would never work.
    key = gateway.new_key(models=["default"], model_limits={"default": {"rpm": 50}})
    assert key["models"] == [FAKE_MODEL]
    assert key["limits"] == {"model_limits": {FAKE_MODEL: {"rpm": 50}}}
    assert _chat_status(gateway, key["key"], "default") == 200
    assert _chat_status(gateway, key["key"], FAKE_MODEL) == 200
