"""How to run each real coding agent hermetically against a gateway (or any base URL).

"Default settings" (issue 20): only the base URL, the key, a model name, non-interactive flags, a
scratch HOME, telemetry and update checks off and a hard time limit. Nothing here turns off a
tool, a beta or a feature of an agent; adding such a switch would hide the very failures these
tests exist to find.

Shared by the tests (tests/agents) and the capture tool (tools/agents/capture.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = ROOT / "tests" / "agents"
INSTALL_DIR = ROOT / ".cache" / "agents"
BIN = INSTALL_DIR / "node_modules" / ".bin"
# A run that has not finished by then is a failure: agents retry a failing gateway for minutes.
RUN_TIMEOUT_S = 120.0


def pinned_versions() -> dict[str, str]:
    """{package: version} as tests/agents/package.json pins them."""
    deps: dict[str, str] = json.loads((PACKAGE_DIR / "package.json").read_text())["dependencies"]
    return deps


def installed() -> bool:
    return all((BIN / name).exists() for name in ("claude", "codex", "opencode", "gemini"))


@dataclass(frozen=True)
class Target:
    """Where an agent is pointed: the gateway root (no /v1), a key, the model name it asks for."""

    root_url: str
    key: str
    model: str


@dataclass
class RunResult:
    agent: str
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False

    def describe(self) -> str:
        state = f"timed out after {self.seconds:.0f}s" if self.timed_out else f"exit {self.returncode}"
        return (
            f"{self.agent} {' '.join(self.args[1:])!r}: {state}\n"
            f"--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}"
        )


@dataclass
class Agent:
    """One agent, configured in its own scratch home (`home`), working in `home/work`."""

    name: str
    package: str
    target: Target
    home: Path
    variant: str = ""
    """claude: "api_key" | "auth_token"; opencode: "openai" | "anthropic"."""
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def workdir(self) -> Path:
        return self.home / "work"

    @property
    def version(self) -> str:
        return pinned_versions()[self.package]

    def prepare(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.name == "codex":
            self._codex_config()
        elif self.name == "opencode":
            self._opencode_config()
        elif self.name == "gemini":
            self._gemini_config()

    def env(self) -> dict[str, str]:
        home = str(self.home)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "USER": "agent",
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "NO_COLOR": "1",
            "TMPDIR": str(self.home / "tmp"),
            "XDG_CONFIG_HOME": f"{home}/.config",
            "XDG_CACHE_HOME": f"{home}/.cache",
            "XDG_DATA_HOME": f"{home}/.local/share",
            "XDG_STATE_HOME": f"{home}/.local/state",
        }
        (self.home / "tmp").mkdir(parents=True, exist_ok=True)
        if self.name == "claude":
            env.update(
                ANTHROPIC_BASE_URL=self.target.root_url,
                DISABLE_TELEMETRY="1",
                CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
                DISABLE_AUTOUPDATER="1",
            )
            variable = "ANTHROPIC_AUTH_TOKEN" if self.variant == "auth_token" else "ANTHROPIC_API_KEY"
            env[variable] = self.target.key
        elif self.name == "codex":
            env.update(CODEX_HOME=f"{home}/.codex", GW_KEY=self.target.key)
        elif self.name == "opencode":
            # Update checks and the models.dev catalogue download off; the provider packages are
            # bundled in the opencode binary (1.18), so nothing is fetched at run time.
            env.update(
                OPENCODE_DISABLE_AUTOUPDATE="1", OPENCODE_DISABLE_MODELS_FETCH="1", GW_KEY=self.target.key
            )
        elif self.name == "gemini":
            # The root, no /v1beta: Gemini CLI adds its own path. Telemetry and update checks off.
            env.update(
                GOOGLE_GEMINI_BASE_URL=self.target.root_url,
                GEMINI_API_KEY=self.target.key,
                GEMINI_CLI_TRUST_WORKSPACE="true",  # headless, an untrusted folder is exit 55
                GEMINI_TELEMETRY_ENABLED="false",
            )
        env.update(self.extra_env)
        return env

    def args(self, prompt: str, *, resume: bool) -> list[str]:
        if self.name == "claude":
            return [
                str(BIN / "claude"),
                "-p",
                prompt,
                "--model",
                self.target.model,
                *(["--continue"] if resume else []),
            ]
        if self.name == "codex":
            head = [str(BIN / "codex"), "exec", "--skip-git-repo-check"]
            return [*head, "resume", "--last", prompt] if resume else [*head, prompt]
        if self.name == "opencode":
            model = f"gw/{self.target.model}"
            return [str(BIN / "opencode"), "run", "-m", model, *(["--continue"] if resume else []), prompt]
        if self.name == "gemini":
            head = [str(BIN / "gemini"), "-m", self.target.model]
            return [*head, "--resume", "latest", "-p", prompt] if resume else [*head, "-p", prompt]
        raise ValueError(self.name)

    def run(self, prompt: str, *, resume: bool = False, timeout_s: float = RUN_TIMEOUT_S) -> RunResult:
        return run_command(self, self.args(prompt, resume=resume), timeout_s=timeout_s)

    def _codex_config(self) -> None:
        codex_home = self.home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        # model_context_window: the window of a model Codex has no metadata for (it still warns;
        # gateway/agent_snippets.py says why). Codex 0.171 ignores model_max_output_tokens.
        (codex_home / "config.toml").write_text(
            f'model = "{self.target.model}"\n'
            'model_provider = "gw"\n'
            "model_context_window = 131072\n"
            "check_for_update_on_startup = false\n"
            "[analytics]\nenabled = false\n"
            "[feedback]\nenabled = false\n"
            "[model_providers.gw]\n"
            'name = "gateway"\n'
            f'base_url = "{self.target.root_url}/v1"\n'
            'env_key = "GW_KEY"\n'
            'wire_api = "responses"\n'
        )

    def _opencode_config(self) -> None:
        if self.variant == "anthropic":
            npm, base = "@ai-sdk/anthropic", f"{self.target.root_url}/v1"
        else:
            npm, base = "@ai-sdk/openai-compatible", f"{self.target.root_url}/v1"
        config = {
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": False,
            "share": "disabled",
            "provider": {
                "gw": {
                    "npm": npm,
                    "name": "gateway",
                    "options": {"baseURL": base, "apiKey": "{env:GW_KEY}"},
                    "models": {self.target.model: {"name": self.target.model}},
                }
            },
        }
        directory = self.home / ".config" / "opencode"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "opencode.json").write_text(json.dumps(config, indent=2))

    def _gemini_config(self) -> None:
        # Since 0.13 a base URL makes Gemini CLI infer a "gateway" auth type it refuses headless
        # (exit 41): the key is named as the auth type instead (coding-agents notes).
        settings = {
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
        }
        directory = self.home / ".gemini"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "settings.json").write_text(json.dumps(settings, indent=2))


def run_command(agent: Agent, args: list[str], *, timeout_s: float = RUN_TIMEOUT_S) -> RunResult:
    """Run `args` as `agent` (its env, its workdir, stdin /dev/null); on time-out its whole process
    group is killed (agents start helpers that would keep the pipes open) and the run fails."""
    started = time.monotonic()
    with subprocess.Popen(
        args,
        cwd=agent.workdir,
        env=agent.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            out, err = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            return RunResult(agent.name, args, -1, out, err, time.monotonic() - started, timed_out=True)
    return RunResult(agent.name, args, process.returncode, out, err, time.monotonic() - started)


PACKAGES = {
    "claude": "@anthropic-ai/claude-code",
    "codex": "@openai/codex",
    "opencode": "opencode-ai",
    "gemini": "@google/gemini-cli",
}


def make_agent(name: str, target: Target, home: Path, variant: str = "") -> Agent:
    agent = Agent(name, PACKAGES[name], target, home, variant)
    agent.prepare()
    return agent
