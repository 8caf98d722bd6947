"""Per-team cache isolation on a REAL vLLM (prefix caching on, as in V1 by default): the engine's
own counter `vllm:prefix_cache_hits_total` (cached prompt tokens) says whether a request reused
blocks another request cached. Every prompt is fresh (a random tag), so only the requests of one
test can hit each other's blocks."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
import redis

from gateway.model_table import NATIVE, ModelConfig, ModelTable, Protocols, Timeouts
from gateway.proxy.cache_salt import derive
from gateway.redis import keys
from tests.conftest import Gateway, GatewayFactory
from tests.http import post
from tests.vllm.conftest import SERVED_NAME
from tests.vllm.prefix_workload import cache_counters

SECRET = "vllm-salt-secret-" + "s" * 32
SHARED = "tiny-shared"
NATIVE_MODEL = "tiny-native-salted"


@pytest.fixture(scope="module")
def gw(make_gateway_module: GatewayFactory, vllm_url: str) -> Iterator[Gateway]:
    timeouts = Timeouts(first_token=120, idle=60, total=300)
    table = ModelTable(
        (
            ModelConfig(name=SERVED_NAME, endpoints=(vllm_url,), timeouts=timeouts),
            ModelConfig(
                name=SHARED,
                upstream_model=SERVED_NAME,
                endpoints=(vllm_url,),
                timeouts=timeouts,
                cache_isolation="shared",
            ),
            ModelConfig(
                name=NATIVE_MODEL,
                upstream_model=SERVED_NAME,
                endpoints=(vllm_url,),
                timeouts=timeouts,
                protocols=Protocols(messages=NATIVE, responses=NATIVE),
            ),
        )
    )
    with make_gateway_module(table, cache_salt_secret=SECRET) as gateway:
        yield gateway


def _prompt() -> str:
    # ~600 tokens: many whole blocks, whatever the block size.
    return secrets.token_hex(8) + " " + " ".join(f"word{i} fact{i * 7}" for i in range(300))


def _hits(gw: Gateway, vllm_url: str, key: str, prompt: str, model: str = SERVED_NAME, **extra: str) -> float:
    """The cached prompt tokens this one request reused at the engine."""
    before, _ = cache_counters([vllm_url])
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 1, **extra}
    reply = post(gw.url + "/v1/chat/completions", body, key=key, timeout=300)
    assert reply.status == 200, reply.body[:300]
    after, _ = cache_counters([vllm_url])
    return after - before


def _team(gw: Gateway) -> tuple[str, str]:
    team = gw.new_team()
    return team, gw.new_key(team)["key"]


def test_a_team_reuses_its_own_cache_and_no_other_team_reaches_it(
    gw: Gateway, vllm_url: str, redis_client: redis.Redis
) -> None:
    team_a, key_a = _team(gw)
    _, key_b = _team(gw)
    prompt = _prompt()
    assert _hits(gw, vllm_url, key_a, prompt) == 0  # fresh
    assert _hits(gw, vllm_url, key_a, prompt) > 0  # team A again: its own blocks
    assert _hits(gw, vllm_url, key_b, prompt) == 0  # team B, same prompt
    # Team B sending, as its own, the exact salt the gateway derives for team A.
    team_a_id = keys.as_text(redis_client.hget(keys.team(team_a), "id") or b"")
    salt_a = derive(SECRET.encode(), "team", team_id=team_a_id, key_id="", client=None)
    assert salt_a is not None
    assert _hits(gw, vllm_url, key_b, prompt, cache_salt=salt_a) == 0
    # A team re-created under A's name is another team.
    gw.admin.call("DELETE", f"/admin/v1/teams/{team_a}")
    gw.admin.call("POST", "/admin/v1/teams", {"name": team_a})
    assert _hits(gw, vllm_url, gw.new_key(team_a)["key"], prompt) == 0


def test_a_shared_model_hits_across_teams(gw: Gateway, vllm_url: str) -> None:
    prompt = _prompt()
    assert _hits(gw, vllm_url, _team(gw)[1], prompt, model=SHARED) == 0
    assert _hits(gw, vllm_url, _team(gw)[1], prompt, model=SHARED) > 0


def test_native_messages_are_isolated_too(gw: Gateway, vllm_url: str) -> None:
    prompt = _prompt()

    def messages(key: str) -> float:
        before, _ = cache_counters([vllm_url])
        body = {"model": NATIVE_MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 1}
        reply = post(gw.url + "/v1/messages", body, key=key, timeout=300)
        assert reply.status == 200, reply.body[:300]
        return cache_counters([vllm_url])[0] - before

    key_a, key_b = _team(gw)[1], _team(gw)[1]
    assert messages(key_a) == 0
    assert messages(key_a) > 0
    assert messages(key_b) == 0
