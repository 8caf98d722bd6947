"""The demo banner's coding-agent lines work as printed: its Claude Code line and its Codex profile,
copied from the banner, complete a turn through `sluicegate demo` with the real agents."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.agents import BIN, Agent, Target, run_command
from tests.e2e.test_demo_and_cli import _start_demo, _stop
from tests.servers import free_port

pytestmark = [pytest.mark.real_agent, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def banner() -> Iterator[str]:
    process, text = _start_demo(free_port())
    try:
        assert "codex -p sluicegate" in text, text
        yield text
    finally:
        _stop(process)


def _bare_agent(name: str, package: str, home: Path) -> Agent:
    # The target is unused: every setting below comes from the banner itself.
    agent = Agent(name, package, Target("", "", ""), home)
    agent.workdir.mkdir(parents=True, exist_ok=True)
    return agent


def test_the_printed_claude_code_line_completes_a_turn(banner: str, tmp_path: Path) -> None:
    line = re.search(r"^  (ANTHROPIC_BASE_URL=.*? claude)$", banner, re.S | re.M)
    assert line is not None, banner
    words = shlex.split(line.group(1).replace("\\\n", " "))
    assert words[-1] == "claude"
    printed = dict(word.split("=", 1) for word in words[:-1])
    assert set(printed) == {
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_MODEL",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    }
    agent = _bare_agent("claude", "@anthropic-ai/claude-code", tmp_path)
    env = {k: v for k, v in agent.env().items() if not k.startswith("ANTHROPIC_")}
    args = [str(BIN / "claude"), "-p", "say hi"]  # -p: the printed line, headless
    result = run_command(_with_env(agent, env, printed), args)
    assert result.returncode == 0, result.describe()
    assert "tok0" in result.stdout, result.describe()  # the demo worker's answer


def test_the_printed_codex_profile_completes_a_turn(banner: str, tmp_path: Path) -> None:
    profile = re.search(r"sluicegate\.config\.toml, then run\n  (.*?)\n\n(.*?)\nAdmin commands", banner, re.S)
    assert profile is not None, banner
    command, toml = shlex.split(profile.group(1)), profile.group(2)
    assert command[1:] == ["codex", "-p", "sluicegate"], command
    variable, key = command[0].split("=", 1)
    agent = _bare_agent("codex", "@openai/codex", tmp_path)
    codex_home = tmp_path / ".codex"
    codex_home.mkdir()
    (codex_home / "sluicegate.config.toml").write_text(toml)
    # The user's own config.toml, as any user's: only telemetry and update checks off.
    (codex_home / "config.toml").write_text(
        "check_for_update_on_startup = false\n[analytics]\nenabled = false\n[feedback]\nenabled = false\n"
    )
    env = {**agent.env(), "CODEX_HOME": str(codex_home), variable: key}
    args = [str(BIN / "codex"), "exec", "--skip-git-repo-check", "-p", "sluicegate", "say hi"]
    result = run_command(_with_env(agent, env, {}), args)
    assert result.returncode == 0, result.describe()
    assert "tok0" in result.stdout + result.stderr, result.describe()


def _with_env(agent: Agent, base: dict[str, str], extra: dict[str, str]) -> Agent:
    """The agent with exactly `base` + `extra` as its environment."""
    env = {**base, **extra}

    class Fixed(Agent):
        def env(self) -> dict[str, str]:
            return env

    return Fixed(agent.name, agent.package, agent.target, agent.home)
