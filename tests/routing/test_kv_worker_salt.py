"""The simulated engine (tests/routing/kv_worker.py) shares cached blocks only between requests
with the same `cache_salt`, as vLLM does, so bench/prefix_routing_bench.py's isolation run
measures what per-team salts cost. Read from its /metrics (prompt tokens served from the cache),
as a client of a real vLLM would; and its per-tenant counters, which tell a hit on a team's own
blocks from a hit on another team's."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator

import pytest

from tests.http import get, post
from tests.routing.kv_worker import TENANT_HEADER, KVCacheWorker
from tests.servers import run_uvicorn


@pytest.fixture
def engine() -> Iterator[tuple[KVCacheWorker, str]]:
    worker = KVCacheWorker(
        output_tokens=1, prefill_base_s=0, prefill_per_token_s=0, decode_base_s=0, decode_per_seq_s=0
    )
    with run_uvicorn(worker.app()) as url:
        yield worker, url


def _hits(url: str) -> float:
    text = get(url + "/metrics").body.decode()
    found = re.search(r"^vllm:prefix_cache_hits_total (\S+)$", text, re.MULTILINE)
    assert found is not None, text
    return float(found.group(1))


def _send(url: str, prompt: str, salt: str | None = None, tenant: str | None = None) -> float:
    """The prompt tokens this request found cached."""
    before = _hits(url)
    body: dict[str, object] = {"model": "m", "messages": [{"role": "user", "content": prompt}]}
    if salt is not None:
        body["cache_salt"] = salt
    reply = post(url + "/v1/chat/completions", body, headers={TENANT_HEADER: tenant} if tenant else None)
    assert reply.status == 200, reply.body
    return _hits(url) - before


def _prompt() -> str:
    return secrets.token_hex(8) + " " + "a long shared system prompt, " * 40  # ~300 tokens, many blocks


def test_only_requests_with_the_same_salt_share_cached_blocks(engine: tuple[KVCacheWorker, str]) -> None:
    _, url = engine
    prompt = _prompt()
    assert _send(url, prompt, salt="team-a") == 0  # fresh
    assert _send(url, prompt, salt="team-a") > 0  # the same salt: its blocks
    assert _send(url, prompt, salt="team-b") == 0  # another salt: none, not even the first block
    assert _send(url, prompt) == 0  # no salt is a salt of its own
    assert _send(url, prompt) > 0
    assert _send(url, prompt, salt="team-b") > 0  # team B's own blocks now


def test_a_hit_on_another_tenants_blocks_is_counted_as_cross_tenant(
    engine: tuple[KVCacheWorker, str],
) -> None:
    worker, url = engine
    prompt = _prompt()
    assert _send(url, prompt, tenant="a") == 0
    shared = _send(url, prompt, tenant="b")  # no salt: B reads A's blocks
    assert shared > 0
    assert worker.tenants["b"].cross_hit_tokens == shared
    assert _send(url, prompt, tenant="b") == shared  # now B's own blocks too: not cross-tenant
    assert worker.tenants["b"].cross_hit_tokens == shared
    assert worker.tenants["b"].hit_tokens == 2 * shared
    assert worker.tenants["a"].cross_hit_tokens == 0
    # Salted per tenant, B cannot reach what A caches.
    prompt = _prompt()
    _send(url, prompt, salt="salt-a", tenant="a")
    assert _send(url, prompt, salt="salt-b", tenant="b") == 0
    assert worker.tenants["b"].cross_hit_tokens == shared
