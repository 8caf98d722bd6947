"""A simulated inference engine with a prefix (KV) cache, for bench/prefix_routing_bench.py.

It models what makes prefix-cache routing pay, and nothing else:

- the prompt as the engine sees it: the chat messages rendered ChatML-style, ~4 bytes a token,
  cut into blocks of BLOCK_TOKENS tokens, each hashed with its parent's hash (its own chain,
  independent of the gateway's hashing);
- a KV cache: an LRU of `cache_blocks` blocks. A request's cached prefix is its leading blocks
  still in the cache; its prompt's blocks enter the cache when it is scheduled, and those of its
  prompt and its output together when it ends (a conversation's next turn starts with both);
- time to first token = `prefill_base_s + prefill_per_token_s * uncached tokens`;
- continuous batching: at most `max_batch` requests run, the rest wait (`num_requests_waiting`);
  each output token takes `decode_base_s + decode_per_seq_s * running`, so a bigger batch is
  slower per token;
- `/metrics` in vLLM's names: running, waiting, KV use, and prefix-cache queries and hits (tokens);
- vLLM's `cache_salt`: mixed into the first block's hash, so only requests with the same salt (or
  none) share cached blocks;
- per tenant (a bench-only `x-kv-tenant` header: the engine cannot know teams, the bench does):
  queried and hit tokens, and hits on blocks only other tenants' requests had cached, so a bench
  can tell a team's reuse of its own prompts from reuse across teams.

Time is simulated with asyncio sleeps, so many engines share one process and barely use a CPU.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import random
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

BLOCK_TOKENS = 16
BYTES_PER_TOKEN = 4
TENANT_HEADER = "x-kv-tenant"


@dataclass
class TenantCounters:
    """Prompt tokens of one tenant's requests: all, served from the cache, and of those the ones
    whose blocks no request of this tenant had put there (cached by another tenant)."""

    query_tokens: int = 0
    hit_tokens: int = 0
    cross_hit_tokens: int = 0


def render(body: dict[str, Any]) -> bytes:
    """ChatML, as a chat template would render it; a completion's prompt as it is."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt.encode()
    parts = []
    for message in body.get("messages") or ():
        content = message.get("content")
        text = content if isinstance(content, str) else orjson.dumps(content).decode()
        parts.append(f"<|im_start|>{message.get('role')}\n{text}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts).encode()


def engine_blocks(prompt: bytes, salt: str | None = None) -> list[bytes]:
    """The prompt's chained block hashes. A salt goes into the first block's hash, as vLLM puts
    `cache_salt` into its first block's extra keys: the chain makes every later block differ too."""
    size = BLOCK_TOKENS * BYTES_PER_TOKEN
    parent = b""
    extra = b"" if salt is None else b"\x00salt:" + salt.encode()
    out = []
    for end in range(size, len(prompt) + 1, size):
        parent = hashlib.sha1(parent + prompt[end - size : end] + extra, usedforsecurity=False).digest()
        extra = b""
        out.append(parent)
    return out


class KVCacheWorker:
    def __init__(
        self,
        model: str = "m",
        *,
        cache_blocks: int = 4096,
        max_batch: int = 8,
        prefill_base_s: float = 0.004,
        prefill_per_token_s: float = 0.0002,
        decode_base_s: float = 0.004,
        decode_per_seq_s: float = 0.0005,
        output_tokens: int = 16,
    ) -> None:
        self.model = model
        self.cache_blocks = cache_blocks
        self.max_batch = max_batch
        self.prefill_base_s = prefill_base_s
        self.prefill_per_token_s = prefill_per_token_s
        self.decode_base_s = decode_base_s
        self.decode_per_seq_s = decode_per_seq_s
        self.output_tokens = output_tokens
        # Each cached block with the tenants whose requests put or found it there.
        self.cache: OrderedDict[bytes, set[str]] = OrderedDict()
        self.tenants: dict[str, TenantCounters] = {}
        self.running = 0
        self.waiting = 0
        self.requests = 0
        self.query_tokens = 0
        self.hit_tokens = 0
        self._slots: asyncio.Semaphore | None = None
        self._ids = itertools.count()

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self.generate, methods=["POST"]),
                Route("/v1/completions", self.generate, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/metrics", self.metrics, methods=["GET"]),
            ]
        )

    async def models(self, request: Request) -> Response:
        data = {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "sim"}]}
        return Response(orjson.dumps(data), media_type="application/json")

    async def health(self, request: Request) -> Response:
        return Response(b"{}", media_type="application/json")

    async def metrics(self, request: Request) -> Response:
        usage = len(self.cache) / self.cache_blocks
        text = (
            f"vllm:num_requests_running {self.running}\n"
            f"vllm:num_requests_waiting {self.waiting}\n"
            f"vllm:kv_cache_usage_perc {usage}\n"
            f"vllm:prefix_cache_queries_total {self.query_tokens}\n"
            f"vllm:prefix_cache_hits_total {self.hit_tokens}\n"
        )
        return Response(text, media_type="text/plain; version=0.0.4")

    def _schedule(self, blocks: list[bytes], tenant: str) -> tuple[int, int]:
        """(cached leading blocks, of those the ones no request of `tenant` had cached); then
        every block of the prompt is in the cache, most recent."""
        cached = foreign = 0
        for block in blocks:
            holders = self.cache.get(block)
            if holders is None:
                break
            cached += 1
            foreign += tenant not in holders
        for block in blocks:
            self.cache.setdefault(block, set()).add(tenant)
            self.cache.move_to_end(block)
        while len(self.cache) > self.cache_blocks:
            self.cache.popitem(last=False)
        return cached, foreign

    async def generate(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        prompt = render(body)
        tenant = request.headers.get(TENANT_HEADER, "")
        salt = body.get("cache_salt")
        salt = salt if isinstance(salt, str) else None
        tokens = max(1, len(prompt) // BYTES_PER_TOKEN)
        self.requests += 1
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_batch)
        ident = f"sim-{next(self._ids)}"
        if body.get("stream"):
            return StreamingResponse(
                self._stream(ident, prompt, tokens, tenant, salt), media_type="text/event-stream"
            )
        text = "".join([piece async for piece in self._run(ident, prompt, tokens, tenant, salt)])
        answer = {
            "id": ident,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": tokens, "completion_tokens": self.output_tokens},
        }
        return Response(orjson.dumps(answer), media_type="application/json")

    async def _run(self, ident: str, prompt: bytes, tokens: int, tenant: str, salt: str | None) -> Any:
        """Yields each output token's text, the first after the prefill."""
        assert self._slots is not None
        blocks = engine_blocks(prompt, salt)
        counters = self.tenants.setdefault(tenant, TenantCounters())
        words = random.Random(ident)
        output: list[str] = []
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            cached, foreign = self._schedule(blocks, tenant)
            hit = min(cached * BLOCK_TOKENS, tokens)
            self.query_tokens += tokens
            self.hit_tokens += hit
            counters.query_tokens += tokens
            counters.hit_tokens += hit
            counters.cross_hit_tokens += min(foreign * BLOCK_TOKENS, hit)
            await asyncio.sleep(self.prefill_base_s + self.prefill_per_token_s * (tokens - hit))
            for _ in range(self.output_tokens):
                output.append(f"o{words.randrange(1000):03d} ")
                yield output[-1]
                await asyncio.sleep(self.decode_base_s + self.decode_per_seq_s * self.running)
            self._schedule(engine_blocks(prompt + "".join(output).encode(), salt), tenant)
        finally:
            self.running -= 1
            self._slots.release()

    async def _stream(self, ident: str, prompt: bytes, tokens: int, tenant: str, salt: str | None) -> Any:
        base = {"id": ident, "object": "chat.completion.chunk", "created": 0, "model": self.model}
        i = 0
        async for piece in self._run(ident, prompt, tokens, tenant, salt):
            delta = {"index": 0, "delta": {"content": piece}, "finish_reason": None}
            yield b"data: " + orjson.dumps({**base, "choices": [delta]}) + b"\n\n"
            i += 1
        last = {"index": 0, "delta": {}, "finish_reason": "stop"}
        yield b"data: " + orjson.dumps({**base, "choices": [last]}) + b"\n\n"
        usage = {"prompt_tokens": tokens, "completion_tokens": i, "total_tokens": tokens + i}
        yield b"data: " + orjson.dumps({**base, "choices": [], "usage": usage}) + b"\n\n"
        yield b"data: [DONE]\n\n"
