"""Prefix-cache routing's pure parts: block hashing, the index, and the prefix_affinity policy."""

from __future__ import annotations

import os
import random

import orjson
import pytest

from gateway.errors import ConfigError
from gateway.model_file import parse_model
from gateway.routing.endpoint import Endpoint
from gateway.routing.load import Load, apply_load
from gateway.routing.policy import CachedPrefix, RouteRequest, least_loaded, prefix_affinity
from gateway.routing.prefix import (
    MAX_HASHED_BLOCKS,
    MAX_HOLDERS,
    PrefixIndex,
    PrefixRouting,
    block_hashes,
    body_blocks,
    prompt_bytes,
)
from gateway.routing.prefix_share import decode, encode

SYSTEM = {"role": "system", "content": "You are a careful assistant. " * 40}


def _chat(*turns: str) -> dict[str, object]:
    messages: list[dict[str, str]] = [SYSTEM]
    for i, text in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return {"model": "m", "messages": messages}


def _endpoints(n: int) -> list[Endpoint]:
    return [Endpoint(f"http://10.0.0.{i}:8000") for i in range(n)]


# -- hashing -------------------------------------------------------------------------------------


def test_blocks_are_whole_only_and_a_chain() -> None:
    prompt = bytes(range(256)) * 4  # 1024 bytes
    blocks = block_hashes(prompt, 256)
    assert len(blocks) == 4
    assert all(len(b) == 8 for b in blocks)
    assert block_hashes(prompt[:255], 256) == ()
    assert block_hashes(prompt + b"partial", 256) == blocks  # a partial last block is not hashed
    # Every block of this prompt has the same bytes, yet each hash differs: it names its prefix.
    assert len(set(blocks)) == 4
    # Changing the first byte changes every hash after it; changing the third block, only from it.
    assert not set(block_hashes(b"X" + prompt[1:], 256)) & set(blocks)
    changed = prompt[:600] + b"Y" + prompt[601:]
    assert block_hashes(changed, 256)[:2] == blocks[:2]
    assert block_hashes(changed, 256)[2:] != blocks[2:]


def test_a_conversation_next_turn_extends_this_turns_blocks() -> None:
    first = block_hashes(prompt_bytes(_chat("What is a KV cache? " * 20)), 64)
    second = block_hashes(prompt_bytes(_chat("What is a KV cache? " * 20, "It stores keys.", "And?")), 64)
    assert len(first) > 10
    # All but the last whole block of the first turn (it ended in the list's closing) carry on.
    assert second[: len(first) - 1] == first[:-1]
    other = block_hashes(prompt_bytes({"messages": [{"role": "system", "content": "Other " * 80}]}), 64)
    assert not set(other) & set(first)


def test_prompt_bytes_reads_every_api_shape_and_preambles_come_first() -> None:
    assert prompt_bytes({"prompt": "abc"}) == b"abc"
    chat = prompt_bytes({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]})
    assert chat.startswith(b'[{"type":"function"}]')
    assert b'"content":"hi"' in chat
    assert prompt_bytes({"system": "S", "messages": [{"role": "user", "content": "u"}]}).startswith(b"S\x00")
    assert prompt_bytes({"instructions": "I", "input": "text"}) == b"I\x00text"
    assert prompt_bytes({"model": "m"}) == b""
    assert body_blocks(b"not json", 4) == ()
    assert body_blocks(b"[1, 2]", 4) == ()
    assert len(body_blocks(orjson.dumps({"prompt": "x" * 40}), 8)) == 5


# -- the index -----------------------------------------------------------------------------------


def test_index_finds_the_longest_prefix_each_endpoint_served() -> None:
    index = PrefixIndex(1000)
    system_only = block_hashes(prompt_bytes(_chat()), 64)
    turn = block_hashes(prompt_bytes(_chat("question " * 30)), 64)
    index.record(system_only, "a")
    index.record(turn, "b")
    assert index.match(turn, ["a", "b", "c"]) == {"b": len(turn)}  # the longest only
    found = index.match(turn, ["a", "c"])
    assert list(found) == ["a"]
    assert 0 < found["a"] < len(turn)  # the shared system prompt, whole blocks of it
    index.record(turn, "c")
    assert index.match(turn, ["a", "b", "c"]) == {"b": len(turn), "c": len(turn)}
    assert index.match(block_hashes(b"z" * 640, 64), ["a", "b"]) == {}
    assert index.known_length(turn, "b") == len(turn)


def test_index_is_bounded_and_evicts_chains_from_their_tails() -> None:
    index = PrefixIndex(10)
    old = block_hashes(b"o" * 64 * 8, 64)
    index.record(old, "a")
    new = block_hashes(b"n" * 64 * 6, 64)
    index.record(new, "a")
    assert len(index) == 10
    # The old chain lost its 4 deepest blocks, not its head: its first 4 blocks still match.
    assert index.match(old, ["a"]) == {"a": 4}
    assert index.match(new, ["a"]) == {"a": 6}
    with pytest.raises(ValueError, match="at least 1"):
        PrefixIndex(0)


def test_a_known_prefix_is_touched_sparsely_and_still_matched_by_its_deepest_block() -> None:
    first = block_hashes(b"t" * 64 * 40, 64)
    index = PrefixIndex(len(first))
    index.record(first[:32], "a")
    index.record(first, "a", known=32)  # the next turn: 8 new blocks, 1 in 8 of the old touched
    index.record(block_hashes(b"o" * 64 * 8, 64), "b")  # 8 other blocks evict 8 untouched ones
    assert len(index) == len(first)
    assert index.match(first, ["a"]) == {"a": 40}
    # The 8 least recently used went (untouched: 0-based 22 and 24 to 30); 23 was touched: 24 blocks.
    assert index.match(first[:30], ["a"]) == {"a": 24}
    assert index.match(first[:32], ["a"]) == {"a": 32}


def test_index_keeps_the_most_recent_holders_of_a_block() -> None:
    index = PrefixIndex(100)
    blocks = block_hashes(b"s" * 128, 64)
    urls = [f"u{i}" for i in range(MAX_HOLDERS + 2)]
    for url in urls:
        index.record(blocks, url)
    assert set(index.match(blocks, urls)) == set(urls[-MAX_HOLDERS:])
    index.record(blocks, "u2")  # again: to the front, not twice; the least recent one goes
    index.record(blocks, "new")
    assert set(index.match(blocks, [*urls, "new"])) == {"new", "u2", *urls[-(MAX_HOLDERS - 2) :]}


# -- the policy ----------------------------------------------------------------------------------


def _cached(lengths: dict[str, int], max_extra_load: float = 4.0) -> RouteRequest:
    return RouteRequest("m", blocks=(b"x" * 8,), cached=CachedPrefix(lengths, max_extra_load))


def test_prefix_affinity_sticks_while_under_the_threshold_and_falls_back_past_it() -> None:
    rng = random.Random(0)
    a, b, c = _endpoints(3)
    request = _cached({a.url: 5, b.url: 2})
    assert all(prefix_affinity([a, b, c], request, rng) is a for _ in range(50))
    a.inflight = 4  # 4 more than the others: at the threshold, still sticky
    assert prefix_affinity([a, b, c], request, rng) is a
    a.inflight = 0
    apply_load(a, Load(running=0, waiting=2, kv_cache_usage=0.0), now=0)  # 2 queued count 8: past it
    picked = {prefix_affinity([a, b, c], request, rng).url for _ in range(50)}
    assert picked == {b.url, c.url}  # least_loaded's choice, not the next-best cache


def test_prefix_affinity_prefers_the_least_loaded_among_equally_cached() -> None:
    rng = random.Random(0)
    a, b, c = _endpoints(3)
    a.inflight = 2
    request = _cached({a.url: 3, b.url: 3})
    assert all(prefix_affinity([a, b, c], request, rng) is b for _ in range(20))


@pytest.mark.parametrize(
    "request_",
    [RouteRequest("m"), _cached({}), _cached({"http://10.0.0.9:8000": 7})],
    ids=["no-blocks", "nothing-cached", "cached-on-a-non-candidate"],
)
def test_no_reusable_prefix_is_exactly_least_loaded(request_: RouteRequest) -> None:
    endpoints = _endpoints(4)
    for i, endpoint in enumerate(endpoints):
        endpoint.inflight = i % 2  # two ties at 0, two at 1: least_loaded draws from the rng
    ours, theirs = random.Random(7), random.Random(7)
    for _ in range(200):
        assert prefix_affinity(endpoints, request_, ours) is least_loaded(endpoints, request_, theirs)
    assert ours.random() == theirs.random()  # the same draws, in the same number


def test_prefix_routing_annotates_records_and_counts_outcomes() -> None:
    index = PrefixIndex(1000)
    outcomes: list[str] = []
    shared: list[tuple[str, int]] = []
    routing = PrefixRouting(
        index,
        4.0,
        on_record=lambda url, blocks: shared.append((url, len(blocks))),
        on_outcome=outcomes.append,
    )
    a, b = _endpoints(2)
    blocks = block_hashes(prompt_bytes(_chat("hello " * 50)), 64)
    first = routing.annotate(RouteRequest("m", blocks=blocks), [a, b])
    assert first.cached is not None
    assert dict(first.cached.lengths) == {}
    routing.record(first, a.url)
    second = routing.annotate(RouteRequest("m", blocks=blocks), [a, b])
    assert second.cached is not None
    assert dict(second.cached.lengths) == {a.url: len(blocks)}
    routing.record(second, a.url)
    routing.record(second, b.url)  # as if a was too loaded
    assert outcomes == ["miss", "hit", "saturated"]
    # Only blocks other replicas cannot know yet travel: none the second time to a.
    assert shared == [(a.url, len(blocks)), (b.url, len(blocks))]
    assert routing.annotate(RouteRequest("m"), [a, b]).cached is None


def test_the_share_encoding_round_trips_and_ignores_a_torn_tail() -> None:
    records = [("http://a:1", [b"12345678", b"abcdefgh"]), ("http://b:2", [b"ABCDEFGH"])]
    payload = encode(records)
    assert decode(payload) == records
    assert decode(payload[:-3]) == records[:1]


def test_prefix_settings_parse_and_are_checked() -> None:
    raw = {
        "name": "m",
        "endpoints": [{"url": "http://w:1"}],
        "routing": {"policy": "prefix_affinity", "prefix": {"block_bytes": 64, "max_extra_load": 2.5}},
    }
    model = parse_model(raw, "models[0]")
    assert model.routing.policy == "prefix_affinity"
    assert (model.routing.prefix.block_bytes, model.routing.prefix.max_extra_load) == (64, 2.5)
    raw["routing"] = {"policy": "prefix_affinity", "prefix": {"block_size": 64}}
    with pytest.raises(ConfigError, match=r"models\[0\]\.routing\.prefix"):
        parse_model(raw, "models[0]")
    # A block of a few bytes hashes 256 of them and routes on nothing; a huge one never fills.
    for size in (8, 1 << 20):
        raw["routing"] = {"policy": "prefix_affinity", "prefix": {"block_bytes": size}}
        with pytest.raises(ConfigError, match=r"block_bytes: must be from 16 to 65536"):
            parse_model(raw, "models[0]")


def test_only_the_first_blocks_of_a_huge_prompt_are_hashed() -> None:
    prompt = os.urandom(64 * 300)
    assert len(block_hashes(prompt, 64)) == MAX_HASHED_BLOCKS
    assert block_hashes(prompt, 64) == block_hashes(prompt[: 64 * MAX_HASHED_BLOCKS], 64)


# -- review: lifecycle, bounds, odd bodies --------------------------------------------------------


def _prefix_router(metrics: object) -> object:
    from gateway.model_table import ModelConfig, ModelTable, RoutingConfig
    from gateway.observability.metrics import Metrics
    from gateway.routing.router import Router

    assert isinstance(metrics, Metrics)
    model = ModelConfig(
        name="m", endpoints=("http://10.0.0.1:8000",), routing=RoutingConfig(policy="prefix_affinity")
    )
    return Router(ModelTable((model,)), metrics)


def _routed(metrics: object, outcome: str) -> float | None:
    from gateway.observability.metrics import Metrics

    assert isinstance(metrics, Metrics)
    return metrics.registry.get_sample_value(
        "sluicegate_prefix_routing_total", {"pool": "m", "outcome": outcome}
    )


def test_a_closed_or_repoliced_pool_drops_its_prefix_routing_series() -> None:
    from gateway.model_table import ModelConfig, RoutingConfig
    from gateway.observability.metrics import Metrics
    from gateway.routing.router import Router

    blocks = block_hashes(os.urandom(2048), 512)
    for change in ("remove", "least_loaded"):
        metrics = Metrics()
        router = _prefix_router(metrics)
        assert isinstance(router, Router)
        pool = router.pool("m")
        assert pool is not None
        assert pool.try_acquire(RouteRequest("m", blocks=blocks), random.Random(1)) is not None
        assert _routed(metrics, "miss") == 1
        if change == "remove":
            router.remove_model("m")
        else:  # the same pool, kept, now routed by another policy
            router.add_model(
                ModelConfig(
                    name="m",
                    endpoints=("http://10.0.0.1:8000",),
                    routing=RoutingConfig(policy="least_loaded"),
                )
            )
        assert _routed(metrics, "miss") is None, change


def test_a_huge_conversation_is_encoded_only_as_far_as_it_is_hashed() -> None:
    many = {
        "model": "m",
        "messages": [SYSTEM] + [{"role": "user", "content": f"q{i} " * 50} for i in range(20_000)],
    }
    whole = prompt_bytes(many)
    limit = 512 * MAX_HASHED_BLOCKS
    bounded = prompt_bytes(many, limit)
    assert len(whole) > 20 * limit
    assert limit <= len(bounded) < limit + 1024
    assert whole.startswith(bounded)
    assert body_blocks(orjson.dumps(many), 512) == block_hashes(b"model:m\x00" + whole, 512)
    # The same for one huge string prompt, and for short bodies (nothing cut).
    text = {"model": "m", "prompt": "é" * (3 * limit)}
    assert prompt_bytes(text).startswith(prompt_bytes(text, limit))
    assert len(prompt_bytes(text, limit)) >= limit
    short = _chat("hi", "hello")
    assert prompt_bytes(short, limit) == prompt_bytes(short)


def test_vllm_cache_salt_separates_prompts_as_the_engine_does() -> None:
    body = _chat("a question " * 100)
    salted = {**body, "cache_salt": "team-a"}
    blocks = body_blocks(orjson.dumps(body), 256)
    assert blocks
    assert not set(blocks) & set(body_blocks(orjson.dumps(salted), 256))
    assert body_blocks(orjson.dumps(salted), 256) == body_blocks(orjson.dumps(salted), 256)
    other = body_blocks(orjson.dumps({**body, "cache_salt": "team-b"}), 256)
    assert not set(other) & set(body_blocks(orjson.dumps(salted), 256))


@pytest.mark.parametrize(
    "body",
    [
        {
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:x" * 999}}]}
            ]
        },
        {"messages": [None, 1, 2.5, True, [], {}], "tools": 7, "system": {"a": [1, None]}},
        {"prompt": [1, 2, 3] * 1000, "instructions": ["x"] * 300},
        {"input": {"not": "a list"}, "messages": "a plain string " * 200},
        {"messages": [{"content": [[[[{"deep": [1]}]]]] * 200}]},
        {"cache_salt": 5, "messages": [{"role": "user", "content": "x" * 5000}]},
    ],
)
def test_odd_but_valid_bodies_hash_without_raising(body: dict[str, object]) -> None:
    body_blocks(orjson.dumps(body), 512)


def test_a_body_orjson_reads_but_cannot_write_is_not_routed_by_prefix() -> None:
    # orjson reads 1,024 levels but writes 254 (the dialects refuse deeper bodies: belt and braces)
    raw = b'{"messages": [{"role": "user", "content": ' + (b"[" * 300) + b"1" + (b"]" * 300) + b"}]}"
    assert body_blocks(raw, 512) == ()


def test_a_fallback_routed_by_prefix_gets_blocks_of_its_own_size() -> None:
    """The primary model routes otherwise: the blocks are cut for the first prefix-routed pool of
    the plan; a pool of another block size ignores them instead of indexing foreign hashes."""
    from gateway.model_table import ModelConfig, ModelTable, PrefixConfig, RoutingConfig
    from gateway.observability.metrics import Metrics
    from gateway.proxy.cache_salt import SaltScope
    from gateway.proxy.worker_plan import prompt_blocks
    from gateway.proxy.worker_protocols import CHAT
    from gateway.routing.router import Router

    def model(name: str, policy: str, block_bytes: int = 512, fallbacks: tuple[str, ...] = ()) -> ModelConfig:
        routing = RoutingConfig(policy=policy, prefix=PrefixConfig(block_bytes=block_bytes))
        return ModelConfig(
            name=name, endpoints=(f"http://{name}:8000",), routing=routing, fallbacks=fallbacks
        )

    router = Router(
        ModelTable(
            (
                model("p", "least_loaded", fallbacks=("f", "g")),
                model("f", "prefix_affinity", 256),
                model("g", "prefix_affinity"),
            )
        ),
        Metrics(),
    )
    body = _chat("hello " * 400)

    class Call:
        protocol = CHAT

        def worker_body(
            self,
            wire_model: str,
            *,
            continuous_usage: bool,
            max_tokens: int | None,
            cache_salt: str | None = None,
        ) -> bytes:
            return orjson.dumps(
                {**body, "model": wire_model, "max_tokens": max_tokens, "cache_salt": cache_salt}
            )

    route = router.resolve("p")
    assert route is not None
    plan = router.plan(route)
    team_a, team_b = (SaltScope(b"s" * 32, team, "key_0", None) for team in ("team_a", "team_b"))
    blocks, size = prompt_blocks(Call(), plan, 64, team_a)  # type: ignore[arg-type]
    assert size == 256
    salt = team_a.for_model("team")
    assert blocks == body_blocks(
        orjson.dumps({**body, "model": "f", "max_tokens": 64, "cache_salt": salt}), 256
    )
    # Hashed with the salt the worker gets: another team's same prompt shares no block in the index.
    assert not set(blocks) & set(prompt_blocks(Call(), plan, 64, team_b)[0])  # type: ignore[arg-type]
    f, g = router.pool("f"), router.pool("g")
    assert f is not None
    assert g is not None
    assert f.prefix is not None
    assert g.prefix is not None
    request = RouteRequest("p", blocks=blocks, block_bytes=size)
    assert f.try_acquire(request, random.Random(1)) is not None
    assert router.prefix_index.known_length(blocks, "http://f:8000") == len(blocks)
    before = len(router.prefix_index)
    assert g.try_acquire(request, random.Random(1)) is not None
    assert len(router.prefix_index) == before  # 256-byte blocks are nothing to a 512-byte pool


def test_a_removed_endpoint_loses_its_conversations_and_does_not_win_them_back() -> None:
    from gateway.model_table import ModelConfig, ModelTable, RoutingConfig
    from gateway.observability.metrics import Metrics
    from gateway.routing.router import Router

    urls = ("http://10.0.0.1:8000", "http://10.0.0.2:8000")
    model = ModelConfig(name="m", endpoints=urls, routing=RoutingConfig(policy="prefix_affinity"))
    router = Router(ModelTable((model,)), Metrics())
    pool = router.pool("m")
    assert pool is not None
    rng = random.Random(3)
    turns = ["first " * 200]

    def turn() -> str:
        got = pool.try_acquire(RouteRequest("m", blocks=body_blocks(orjson.dumps(_chat(*turns)), 512)), rng)
        assert got is not None
        pool.release(got[0])
        turns.append(f"turn {len(turns)} " * 100)
        return got[0].url

    home = turn()
    assert turn() == home
    other = next(u for u in urls if u != home)
    pool.set_endpoints([other])  # discovery: the pod is gone
    assert turn() == other
    pool.set_endpoints(urls)  # back (a new pod at the same address: its cache is empty)
    new = pool.get(home)
    assert new is not None
    pool.confirm(new)
    assert [turn() for _ in range(3)] == [other] * 3
    assert set(router.prefix_endpoints()) == set(urls)


def test_the_same_prompt_for_another_model_shares_no_block() -> None:
    """An endpoint serving two models (or LoRA adapters) caches each one's prompts apart."""
    prompt = {"messages": [{"role": "system", "content": "You are terse. " * 40}]}
    base = body_blocks(orjson.dumps({"model": "base", **prompt}), 64)
    adapter = body_blocks(orjson.dumps({"model": "base-lora", **prompt}), 64)
    again = body_blocks(orjson.dumps({"model": "base", **prompt}), 64)
    assert base == again
    assert len(base) == len(adapter) > 1
    assert not set(base) & set(adapter)
