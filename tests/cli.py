"""The real `sluicegate` command, as the tests run it: a child process with the environment a user
would have (none of this machine's SLUICEGATE_* settings, only what the test gives)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cli_env(url: str | None = None, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICEGATE_")}
    if url is not None:
        env["SLUICEGATE_URL"] = url
    env.update(settings)
    return env


def run_cli(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )
