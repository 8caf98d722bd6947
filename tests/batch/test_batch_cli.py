"""`sluicegate batches list|show|cancel`, the real command against a real gateway."""

from __future__ import annotations

import json

from tests.batch.conftest import chat_lines, upload, wait_for_batch
from tests.cli import cli_env, run_cli
from tests.conftest import Gateway


def test_batches_list_show_and_cancel(batch_gateway: Gateway) -> None:
    key = batch_gateway.new_key()
    team = key["team"]
    client = batch_gateway.client(key["key"])
    file_id = upload(client, chat_lines(3))
    batch = client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    wait_for_batch(client, batch.id)
    env = cli_env(batch_gateway.url, SLUICEGATE_ADMIN_TOKEN=batch_gateway.admin_token)

    listed = run_cli(env, "batches", "list", "--team", team)
    assert listed.returncode == 0, listed.stderr
    assert batch.id in listed.stdout
    assert "completed" in listed.stdout
    assert "3/3" in listed.stdout

    shown = run_cli(env, "batches", "show", batch.id, "--team", team, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["request_counts"] == {"total": 3, "completed": 3, "failed": 0}

    # A finished batch cannot be cancelled: a refusal the user can act on, exit 1.
    refused = run_cli(env, "batches", "cancel", batch.id, "--team", team)
    assert refused.returncode == 1
    assert "cannot cancel" in refused.stderr.lower()

    other = run_cli(env, "batches", "show", batch.id, "--team", batch_gateway.new_team())
    assert other.returncode == 1
    assert "no such batch" in other.stderr.lower()
