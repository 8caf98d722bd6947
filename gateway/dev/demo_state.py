"""`sluicegate demo --state DIR`: what a demo keeps across restarts, so an agent configured with its
key and a console signed in with its token work again after Ctrl-C and a new start.

DIR holds Redis's append-only file (`redis/`, every team, key, budget and usage row) and
`demo.json` with the admin token and the demo key's secret, which Redis holds only as a hash. Both
are secrets: the directory and the file are the user's own (0700, 0600), as ~/.ssh is.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

_FILE = "demo.json"


@dataclass(frozen=True)
class DemoSecrets:
    admin_token: str
    key_id: str = ""
    key: str = ""


def redis_dir(state: str) -> str:
    path = Path(state) / "redis"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return str(path)


def files_dir(state: str | None) -> str:
    """Where the demo's Files and Batch API keeps its files: under the state directory, or a
    fresh temporary directory (its batches, in an in-memory Redis, end with the demo too)."""
    if state is None:
        return tempfile.mkdtemp(prefix="sluicegate-demo-files-")
    path = Path(state) / "files"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return str(path)


def load(state: str | None) -> DemoSecrets:
    """The secrets kept in `state`, or a fresh admin token (and no key yet)."""
    if state is not None:
        try:
            raw = json.loads((Path(state) / _FILE).read_text())
            return DemoSecrets(str(raw["admin_token"]), str(raw.get("key_id", "")), str(raw.get("key", "")))
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a first start, or a file of no use: start afresh
    return DemoSecrets(admin_token=secrets.token_urlsafe(32))


def save(state: str | None, kept: DemoSecrets) -> None:
    if state is None:
        return
    directory = Path(state)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / _FILE
    # Created 0600 before a byte is written: the token is never readable by others, even briefly.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump(asdict(kept), file)
