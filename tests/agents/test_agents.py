"""Claude Code, Codex, opencode and Gemini CLI, as shipped and with default settings, through the gateway.

Each case is one scripted conversation (tests/agents/script.py) on one pool kind; every step's
outcome is a cell of the pass matrix (docs/agents.md), checked against tests/agents/results.json.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.agents import agents
from tests.agents.agents import Target
from tests.agents.conftest import POOLS, Outcomes, Stack
from tests.agents.script import conversation
from tests.waiting import wait_until

# (agent, variant): opencode's OpenAI-compatible provider speaks chat, which both pool kinds
# serve alike, so it runs on the translated pool only.
CASES = [
    ("claude", "api_key", "translated"),
    ("claude", "api_key", "native"),
    ("claude", "auth_token", "translated"),
    ("claude", "auth_token", "native"),
    ("codex", "", "translated"),
    ("codex", "", "native"),
    ("opencode", "openai", "translated"),
    ("opencode", "anthropic", "translated"),
    ("opencode", "anthropic", "native"),
    # Gemini's API is served by translation only (no engine speaks it): the translated pool.
    ("gemini", "", "translated"),
]
FEATURES = ("plain", "tool", "continued", "usage")
LABELS = {
    ("claude", "api_key"): "Claude Code (ANTHROPIC_API_KEY)",
    ("claude", "auth_token"): "Claude Code (ANTHROPIC_AUTH_TOKEN)",
    ("codex", ""): "Codex CLI",
    ("opencode", "openai"): "opencode (OpenAI-compatible)",
    ("opencode", "anthropic"): "opencode (Anthropic)",
    ("gemini", ""): "Gemini CLI",
}


def cell(name: str, variant: str, pool: str, feature: str) -> str:
    agent = agents.PACKAGES[name]
    return f"{LABELS[(name, variant)]}|{agents.pinned_versions()[agent]}|{pool}|{feature}"


def metered(stack: Stack, team: str) -> tuple[int, int]:
    rows = stack.gateway.usage(team)
    return sum(r["prompt_tokens"] for r in rows), sum(r["completion_tokens"] for r in rows)


@pytest.mark.real_agent
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("name", "variant", "pool"), CASES, ids=[f"{n}-{v or 'default'}-{p}" for n, v, p in CASES]
)
def test_conversation(
    stack: Stack, scratch: Path, outcomes: Outcomes, name: str, variant: str, pool: str
) -> None:
    team = stack.gateway.new_team()
    key = stack.gateway.new_key(team)["key"]
    agent = agents.make_agent(name, Target(stack.gateway.url, key, POOLS[pool].name), scratch, variant)
    since = len(stack.worker_tap.exchanges)
    cells = [cell(name, variant, pool, feature) for feature in FEATURES]
    for i, turn in enumerate(conversation(agent.workdir)):
        result = agent.run(turn.prompt, resume=turn.resume)
        passed = result.returncode == 0 and turn.expect in result.stdout
        detail = f"expected {turn.expect!r} in the output\n{result.describe()}"
        outcomes.check(cells[i], passed, detail, not_reached=cells[i + 1 :])
    worker = stack.worker_usage(since)
    # Settlement writes the usage as each answer ends; the last one may still be on its way.
    try:
        wait_until(lambda: metered(stack, team) == worker, 10, "metered usage to match the worker's")
        passed = worker[0] > 0
    except AssertionError:
        passed = False
    detail = f"metered (prompt, completion) {metered(stack, team)}, worker reported {worker}"
    outcomes.check(cells[3], passed, detail, not_reached=[])


@pytest.mark.real_agent
@pytest.mark.timeout(300)
def test_a_30k_tokens_a_minute_key_gets_a_clamped_first_turn(
    stack: Stack, scratch: Path, outcomes: Outcomes
) -> None:
    """Claude Code reserves max_tokens 32000 for every turn; a 30,000 tokens/minute key must still get
    its first turn, capped at what the limit can grant, and the agent must be told (issue 20)."""
    team = stack.gateway.new_team()
    key = stack.gateway.new_key(team, tpm=30_000)["key"]
    target = Target(stack.gateway.url, key, POOLS["translated"].name)
    agent = agents.make_agent("claude", target, scratch, "api_key")
    since_gw, since_worker = len(stack.gateway_tap.exchanges), len(stack.worker_tap.exchanges)
    result = agent.run("Say hi.")
    turns = [e for e in stack.gateway_tap.exchanges[since_gw:] if e.path == "/v1/messages"]
    first = turns[0] if turns else None
    worker = stack.worker_usage(since_worker)
    try:
        wait_until(lambda: metered(stack, team) == worker, 10, "metered usage to match the worker's")
        exact = True
    except AssertionError:
        exact = False
    passed = (
        first is not None
        and first.status == 200
        and "x-sluicegate-max-tokens" in first.headers
        and exact
        and worker[0] > 0
    )
    detail = (
        f"first turn: {first.status if first else None} {first.headers if first else {}}\n"
        f"metered {metered(stack, team)}, worker reported {worker}\n{result.describe()}"
    )
    outcomes.check(
        cell("claude", "api_key", "translated", "30k tokens/min key"), passed, detail, not_reached=[]
    )


def test_a_run_past_its_time_limit_fails_with_the_agents_output(scratch: Path) -> None:
    """A gateway that accepts the connection and never answers: the run is cut at its limit, and
    what a test prints names the time-out and carries the agent's stderr."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        agent = agents.Agent("probe", "none", Target(url, "k", "m"), scratch)
        agent.prepare()
        script = scratch / "agent.sh"
        script.write_text("#!/bin/sh\necho 'connecting to the gateway' >&2\nexec sleep 30\n")
        script.chmod(0o755)
        result = agents.run_command(agent, [str(script)], timeout_s=1)
    assert result.timed_out
    assert "timed out after" in result.describe()
    assert "connecting to the gateway" in result.describe()


@pytest.mark.real_agent
def test_gemini_cli_is_installed_at_its_pin(scratch: Path) -> None:
    agent = agents.make_agent("gemini", Target("http://127.0.0.1:9", "k", "m"), scratch)
    result = agents.run_command(agent, [str(agents.BIN / "gemini"), "--version"])
    assert result.returncode == 0, result.describe()
    assert result.stdout.strip() == agents.pinned_versions()["@google/gemini-cli"]
