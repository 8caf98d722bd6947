"""The scripted conversation every agent goes through (the fake worker's side: workers/fake/agent_turns.py).

1. `plain`: a new session, a plain question; the worker answers its usual `tok0 tok1 …`.
2. `tool`: continued; the prompt names a file with `sluicegate-read:<path>`, the worker calls the
   agent's read-only tool on it, the agent runs it and sends the result, the worker answers
   `tool said: <the file's first words>`: the canary in the final text proves the round trip.
3. `continued`: continued again; `sluicegate-recall:<canary>` makes the worker answer `recall
   <canary> seen` only when the earlier turns were resent.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Turn:
    name: str
    prompt: str
    resume: bool
    expect: str
    """Text the agent's final output must contain."""


def conversation(workdir: Path) -> list[Turn]:
    canary = "canary-" + secrets.token_hex(4)
    notes = workdir / "notes.txt"
    notes.write_text(f"{canary} is the word written in this file\n")
    return [
        Turn("plain", "Say hi.", False, "tok0"),
        Turn("tool", f"What does this file say? sluicegate-read:{notes}", True, canary),
        Turn(
            "continued",
            f"Do you remember the word? sluicegate-recall:{canary}",
            True,
            f"recall {canary} seen",
        ),
    ]
