"""Run a coding agent from set-up text exactly as the gateway printed it (the demo banner, the
console's new-key page): the printed variables and files, a scratch home, headless flags only."""

from __future__ import annotations

import shlex
from pathlib import Path

from tests.agents.agents import BIN, Agent, RunResult, Target, run_command


def _bare_agent(name: str, package: str, home: Path, env: dict[str, str]) -> Agent:
    """An agent whose environment is the scratch one plus `env`, nothing of a Target's."""
    base = Agent(name, package, Target("", "", ""), home)
    base.workdir.mkdir(parents=True, exist_ok=True)
    scratch = {k: v for k, v in base.env().items() if not k.startswith("ANTHROPIC_")}
    fixed = {**scratch, **env}

    class Printed(Agent):
        def env(self) -> dict[str, str]:
            return fixed

    return Printed(name, package, base.target, home)


def claude_line_variables(line: str) -> dict[str, str]:
    """The `NAME=value ... claude` line (with its backslash continuations) as its variables."""
    words = shlex.split(line.replace("\\\n", " "))
    assert words[-1] == "claude", line
    return dict(word.split("=", 1) for word in words[:-1])


def run_claude(line: str, home: Path, prompt: str = "say hi") -> RunResult:
    agent = _bare_agent("claude", "@anthropic-ai/claude-code", home, claude_line_variables(line))
    return run_command(agent, [str(BIN / "claude"), "-p", prompt])  # -p: the printed line, headless


def run_codex(command: str, profile: str, home: Path, prompt: str = "say hi") -> RunResult:
    """`command` is `VAR=key codex -p NAME`; `profile` is saved as $CODEX_HOME/NAME.config.toml."""
    words = shlex.split(command)
    assert words[1:3] == ["codex", "-p"], command
    variable, key = words[0].split("=", 1)
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / f"{words[3]}.config.toml").write_text(profile)
    # The user's own config.toml, as any user's: only telemetry and update checks off.
    (codex_home / "config.toml").write_text(
        "check_for_update_on_startup = false\n[analytics]\nenabled = false\n[feedback]\nenabled = false\n"
    )
    agent = _bare_agent("codex", "@openai/codex", home, {"CODEX_HOME": str(codex_home), variable: key})
    args = [str(BIN / "codex"), "exec", "--skip-git-repo-check", "-p", words[3], prompt]
    return run_command(agent, args)
