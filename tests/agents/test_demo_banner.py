"""The demo banner's coding-agent lines work as printed: its Claude Code line and its Codex profile,
copied from the banner, complete a turn through `sluicegate demo` with the real agents."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.printed import claude_line_variables, run_claude, run_codex
from tests.e2e.test_demo_and_cli import _start_demo, _stop
from tests.servers import free_port
from workers.fake.app import MAX_MODEL_LEN

pytestmark = [pytest.mark.real_agent, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def banner() -> Iterator[str]:
    process, text = _start_demo(free_port())
    try:
        assert "codex -p sluicegate" in text, text
        yield text
    finally:
        _stop(process)


def test_the_printed_claude_code_line_completes_a_turn(banner: str, tmp_path: Path) -> None:
    line = re.search(r"^  (ANTHROPIC_BASE_URL=.*? claude)$", banner, re.S | re.M)
    assert line is not None, banner
    printed = claude_line_variables(line.group(1))
    assert set(printed) == {
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_MODEL",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL",
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS",
    }
    # The demo worker's window: the model's own, not Claude Code's 1M guess.
    assert printed["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == str(MAX_MODEL_LEN)
    result = run_claude(line.group(1), tmp_path)
    assert result.returncode == 0, result.describe()
    assert "tok0" in result.stdout, result.describe()  # the demo worker's answer


def test_the_printed_codex_profile_completes_a_turn(banner: str, tmp_path: Path) -> None:
    profile = re.search(r"sluicegate\.config\.toml, then run\n  (.*?)\n\n(.*?)\n\nNote:", banner, re.S)
    assert profile is not None, banner
    command, toml = profile.group(1), profile.group(2) + "\n"
    assert f"model_context_window = {MAX_MODEL_LEN}" in toml
    result = run_codex(command, toml, tmp_path)
    assert result.returncode == 0, result.describe()
    assert "tok0" in result.stdout + result.stderr, result.describe()
