"""The console's Batches page: a team's batches with their status and progress, in a real
Chromium against a real gateway with the Files and Batch API on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import BrowserContext, expect

from tests.batch.conftest import chat_lines, upload, wait_for_batch
from tests.conftest import Gateway, GatewayFactory
from tests.console.conftest import UI, sign_in


@pytest.fixture(scope="module")
def batch_console(
    make_gateway_module: GatewayFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    files = tmp_path_factory.mktemp("files")
    with make_gateway_module(files_url=f"file://{files}", batch_poll_interval_s=0.05) as gateway:
        yield gateway


def test_a_teams_batches_show_their_progress(context: BrowserContext, batch_console: Gateway) -> None:
    key = batch_console.new_key()
    team = key["team"]
    client = batch_console.client(key["key"])
    done = wait_for_batch(
        client,
        client.batches.create(
            input_file_id=upload(client, chat_lines(4)),
            endpoint="/v1/chat/completions",
            completion_window="24h",
        ).id,
    )
    page = context.new_page()
    sign_in(page, batch_console)
    expect(page.locator("h1")).to_have_text("Teams")
    page.goto(f"{batch_console.url}{UI}/teams/{team}")
    page.click("text=batches")
    expect(page.locator("h1")).to_have_text(f"Batches of {team}")
    row = page.locator(f"#batch-{done.id}")
    expect(row.locator(".batch-status")).to_have_text("completed")
    expect(row.locator(".batch-progress")).to_contain_text("4/4")
    expect(page.locator("#batch-lines")).to_contain_text("Lines queued: 0")
