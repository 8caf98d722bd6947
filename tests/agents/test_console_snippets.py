"""The console's new-key snippets (issue 37) run as printed by the real Claude Code and Codex: each
names a model the key may use and its context window, so neither asks for its vendor's default
model name (a 404) nor assumes a window the model does not have."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents.conftest import POOLS, Stack
from tests.agents.console_page import new_key_snippets
from tests.agents.printed import claude_line_variables, run_claude, run_codex
from tests.waiting import wait_until
from workers.fake.app import MAX_MODEL_LEN

pytestmark = [pytest.mark.real_agent, pytest.mark.timeout(300)]
FIRST = POOLS["translated"].name  # the first model of the stack's table
NATIVE = POOLS["native"].name


def _windows_read(stack: Stack) -> bool:
    models = stack.gateway.admin.call("GET", "/admin/v1/models")["data"]
    return all(e["max_model_len"] for m in models for p in m["pools"] for e in p["endpoints"])


@pytest.mark.parametrize(("allowed", "model"), [([], FIRST), ([NATIVE], NATIVE)], ids=["every", "one"])
def test_the_consoles_snippets_complete_a_turn_as_printed(
    stack: Stack, scratch: Path, allowed: list[str], model: str
) -> None:
    wait_until(lambda: _windows_read(stack), 10, "the gateway to read its workers' context windows")
    gw = stack.gateway
    printed = new_key_snippets(gw.url, gw.admin_token, gw.new_team(), allowed)
    variables = claude_line_variables(printed.claude_code)
    gw.secrets_created.append(variables["ANTHROPIC_AUTH_TOKEN"])
    assert variables["ANTHROPIC_MODEL"] == model
    assert variables["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == str(MAX_MODEL_LEN)
    assert f'model = "{model}"' in printed.codex_profile
    assert f"model_context_window = {MAX_MODEL_LEN}" in printed.codex_profile
    # A key allowed every model is told which one the snippets picked and how to change it.
    assert any("the key may use any" in n for n in printed.notes) == (allowed == [])

    claude = run_claude(printed.claude_code, scratch / "claude")
    assert claude.returncode == 0, claude.describe()
    assert "tok0" in claude.stdout, claude.describe()
    codex = run_codex(printed.codex_command, printed.codex_profile, scratch / "codex")
    assert codex.returncode == 0, codex.describe()
    assert "tok0" in codex.stdout + codex.stderr, codex.describe()
