"""A wrong key fails each real agent at once with the gateway's authentication error (issue 37).

Fast is proved by what the gateway received, not by a clock: an agent that retried the 401 would
send it again and again (Claude Code did, for minutes, before the answer said `x-should-retry:
false`); each agent here sends its refused request at most MAX_TRIES times and exits non-zero,
saying why.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents import agents
from tests.agents.agents import Target
from tests.agents.conftest import POOLS, Stack

pytestmark = [pytest.mark.real_agent, pytest.mark.timeout(300)]
WRONG = "sk-sg-this-key-does-not-exist"
# Refused requests each agent sends before it exits. Claude Code and Gemini CLI: one. opencode: two,
# one per call it makes (the session's title and the turn), neither retried. Codex: six, its request
# and the five reconnects it makes of any failed stream (`stream_max_retries`), x-should-retry or not.
# Without `x-should-retry: false` Claude Code retried its 401 for about three minutes.
MAX_TRIES = {"claude": 1, "gemini": 1, "opencode": 2, "codex": 6}
CASES = [
    ("claude", "api_key"),
    ("claude", "auth_token"),
    ("codex", ""),
    ("opencode", "openai"),
    ("opencode", "anthropic"),
    ("gemini", ""),
]
# What each agent prints of the gateway's 401: its status, or the envelope's message.
SAYS = ("401", "Invalid API key", "invalid_api_key", "authentication_error", "UNAUTHENTICATED")


@pytest.mark.parametrize(("name", "variant"), CASES, ids=[f"{n}-{v or 'default'}" for n, v in CASES])
def test_a_wrong_key_fails_at_once_with_the_auth_error(
    stack: Stack, scratch: Path, name: str, variant: str
) -> None:
    target = Target(stack.gateway.url, WRONG, POOLS["translated"].name)
    agent = agents.make_agent(name, target, scratch, variant)
    since = len(stack.gateway_tap.exchanges)
    result = agent.run("say hi")
    refused = [e for e in stack.gateway_tap.exchanges[since:] if e.status == 401]
    assert not result.timed_out, result.describe()
    assert result.returncode != 0, result.describe()
    assert any(s in result.stdout + result.stderr for s in SAYS), result.describe()
    assert refused, "the agent never reached the gateway"
    assert all(e.headers.get("x-should-retry") == "false" for e in refused)
    sent = [(e.path, len(e.request)) for e in refused]
    assert len(refused) <= MAX_TRIES[name], f"refused {sent}:\n{result.describe()}"
