"""Session stickiness for coding agents: the session values Claude Code, Codex and opencode send
place an agent's next turn on the engine that served its first, always scoped by the caller's
team (gateway/routing/session.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.model_table import HealthConfig, ModelConfig, ModelTable, RoutingConfig
from gateway.routing.policy import (
    CachedPrefix,
    RouteRequest,
    endpoint_seed,
    prefix_affinity,
    session_affinity,
)
from gateway.routing.session import Session, session_of
from tests.conftest import Gateway, GatewayFactory
from tests.http import post
from tests.routing.conftest import WorkerFactory
from tests.routing.worker import ProgrammableWorker

# -- which value is the session ------------------------------------------------------------------


def _headers(**named: str) -> list[tuple[bytes, bytes]]:
    return [(name.replace("_", "-").encode(), value.encode()) for name, value in named.items()]


def test_the_session_is_the_first_value_by_precedence() -> None:
    every = _headers(
        session_id="codex",
        x_claude_code_session_id="claude",
        x_session_affinity="opencode",
        x_session_id="explicit",
        user_agent="curl/8",
    )
    body = b'{"model": "m", "prompt_cache_key": "cache-key"}'
    assert session_of(every, body, "user-1") == Session("explicit", "x-session-id")
    order = ["x_session_id", "x_session_affinity", "x_claude_code_session_id", "session_id"]
    for i, name in enumerate(order):
        rest = _headers(**{n: n for n in order[i:]})
        assert session_of(rest, body, "user-1") == Session(name, name.replace("_", "-"))
    blank = _headers(user_agent="x", x_session_id="  ")  # a blank value names no session
    assert session_of(blank, body, "user-1") == Session("cache-key", "prompt_cache_key")
    assert session_of([], b'{"model": "m"}', "user-1") == Session("user-1", "user")
    assert session_of([], b'{"model": "m", "prompt_cache_key": 7}', None) is None
    assert session_of([], b"{}", None) is None


# -- team scoping, at the level of the hash --------------------------------------------------------


@dataclass
class _View:
    url: str
    inflight: int = 0
    load_base: float = 0.0
    waiting: int = 0

    @property
    def hrw_seed(self) -> int:
        return endpoint_seed(self.url)


ENGINES = [_View(f"http://10.0.0.{i}:8000") for i in range(4)]


def _placed(team: str, session: str) -> str:
    request = RouteRequest("m", session_id=session, team=team)
    return session_affinity(ENGINES, request, random.Random(0)).url


def test_two_teams_sending_the_same_session_value_are_placed_independently() -> None:
    sessions = [f"session-{i}" for i in range(400)]
    # Within a team a value always lands on the same engine, and values spread over all of them.
    assert all(_placed("team-a", s) == _placed("team-a", s) for s in sessions)
    assert {_placed("team-a", s) for s in sessions} == {e.url for e in ENGINES}
    # Across teams the key differs, so the same value ranks the engines anew: the two teams meet
    # on one engine about 1 time in 4 (independent placements), not always (one shared value).
    assert (
        RouteRequest("m", session_id="s", team="a").affinity_key
        != RouteRequest("m", session_id="s", team="b").affinity_key
    )
    same = sum(_placed("team-a", s) == _placed("team-b", s) for s in sessions)
    assert 60 <= same <= 140, same  # Binomial(400, 1/4): mean 100, sd ~8.7
    # Nor does the team alone decide: a team's sessions still spread.
    assert {_placed("team-b", s) for s in sessions} == {e.url for e in ENGINES}


def test_prefix_affinity_places_a_session_where_session_affinity_does_when_the_prefix_ties() -> None:
    """An agent's fixed system prompt and tools are held by every engine: the tie is broken by
    the session, so every replica places the session's first turn on the same engine."""
    everywhere = CachedPrefix({e.url: 3 for e in ENGINES}, max_extra_load=8)
    nowhere = CachedPrefix({}, max_extra_load=8)
    for i in range(50):
        for cached in (everywhere, nowhere):
            request = RouteRequest("m", session_id=f"s-{i}", team="t", cached=cached)
            expected = session_affinity(ENGINES, request, random.Random(0))
            assert all(
                prefix_affinity(ENGINES, request, random.Random(seed)) is expected for seed in range(5)
            )


# -- through the gateway, with the agents' own headers and bodies ---------------------------------


def _claude_code(turns: list[dict[str, Any]], session: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    body = {"model": "m", "max_tokens": 32000, "system": "You are Claude Code.", "messages": turns}
    return "/v1/messages", body, {"x-claude-code-session-id": session}


def _codex(turns: list[dict[str, Any]], session: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    body = {"model": "m", "instructions": "You are Codex.", "input": turns, "prompt_cache_key": session}
    return "/v1/responses", body, {"session-id": session}


def _codex_body_only(turns: list[dict[str, Any]], session: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    body = {"model": "m", "input": turns, "prompt_cache_key": session}
    return "/v1/responses", body, {}


def _opencode(turns: list[dict[str, Any]], session: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    body = {
        "model": "m",
        "max_tokens": 32000,
        "messages": [{"role": "system", "content": "opencode"}, *turns],
    }
    return "/v1/chat/completions", body, {"x-session-affinity": session}


AGENTS = {"claude": _claude_code, "codex": _codex, "codex-body": _codex_body_only, "opencode": _opencode}


def _serving(
    gw: Gateway, key: str, started: list[ProgrammableWorker], path: str, body: Any, headers: Any
) -> int:
    """Sends one turn; returns the index of the worker that served it."""
    before = [w.requests for w in started]
    reply = post(f"{gw.url}{path}", body, key=key, headers=headers)
    assert reply.status == 200, reply.body
    served = [i for i, w in enumerate(started) if w.requests != before[i]]
    assert len(served) == 1
    return served[0]


def test_an_agents_next_turn_reaches_the_engine_that_served_its_first(
    make_gateway: GatewayFactory, workers: WorkerFactory
) -> None:
    started = [workers() for _ in range(4)]
    model = ModelConfig(
        name="m",
        endpoints=tuple(url for _, url in started),
        routing=RoutingConfig(policy="session_affinity"),
        health=HealthConfig(probe_interval=3600),
    )
    engines = [w for w, _ in started]
    with make_gateway(ModelTable((model,))) as gw:
        key = gw.new_key()["key"]
        for agent, shape in AGENTS.items():
            homes = set()
            for n in range(8):
                session = f"{agent}-session-{n}"
                turns: list[dict[str, Any]] = [{"role": "user", "content": f"turn 0 of {session}"}]
                first = _serving(gw, key, engines, *shape(turns, session))
                for turn in range(1, 3):
                    turns += [
                        {"role": "assistant", "content": "ok"},
                        {"role": "user", "content": f"turn {turn} of {session}"},
                    ]
                    assert _serving(gw, key, engines, *shape(turns, session)) == first, (agent, n, turn)
                homes.add(first)
            assert len(homes) > 1, f"{agent}: every session on one engine, so stickiness shows nothing"


def test_prompt_cache_key_is_read_without_parsing_the_body_again(monkeypatch: Any) -> None:
    """The dialect has parsed the body already: finding `prompt_cache_key` must not parse a
    large body a second time on every request (only the key's own value is decoded)."""
    parsed: list[int] = []
    real = orjson.loads

    def counting(data: Any) -> Any:
        parsed.append(len(data))
        return real(data)

    big = orjson.dumps({"model": "m", "input": "x" * 1_000_000, "prompt_cache_key": 'th"read-1'})
    monkeypatch.setattr(orjson, "loads", counting)
    assert session_of([], big, None) == Session('th"read-1', "prompt_cache_key")
    assert all(size < 1000 for size in parsed), parsed
    # The field is found however the JSON is spaced, and only as a field with a string value.
    spaced = b'{"model": "m", "tools": ["prompt_cache_key"], "prompt_cache_key" :\n "k\\u00e9"}'
    assert session_of([], spaced, None) == Session("k\u00e9", "prompt_cache_key")
    assert session_of([], b'{"prompt_cache_key": "  "}', "u") == Session("u", "user")
    assert session_of([], b'{"prompt_cache_key": null}', None) is None
