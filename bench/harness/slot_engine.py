"""A fake engine with a fixed number of slots, for bench/batch_bench.py: what an inference server's
scheduler does, and nothing of its arithmetic.

A request holds one of `--slots` slots from its first token to its last; the others wait in the
engine's queue. The queue is ordered as vLLM's is: by arrival (`--policy fcfs`), or by (`priority`,
arrival) with `--policy priority` (lower first; a body without `priority` has 0; vLLM answers 400
to a non-zero priority under fcfs, and so does this). A running request is never stopped for a
waiting one (vLLM preempts only under KV-cache pressure, which this engine does not model). A slot
serves its request for `--prefill-ms` before the first token, then one token every `--token-ms`.

It answers `POST /v1/chat/completions` (a stream when asked, with a usage chunk), `GET /health`,
`GET /v1/models`, `GET /metrics` (vllm:num_requests_running/waiting, for least_loaded), and
`GET /stats`: slot-seconds used so far by priority class (`interactive`: 0, `batch`: > 0), the
number of slots and the time since start, from which a run works out the share of idle capacity
the batch used.

    python bench/harness/slot_engine.py --port 0 --slots 4   # prints "READY <port>" once listening
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Slots:
    slots: int
    priority_policy: bool
    running: int = 0
    waiting: list[tuple[int, int, asyncio.Future[None]]] = field(default_factory=list)
    order: itertools.count[int] = field(default_factory=itertools.count)
    busy_s: dict[str, float] = field(default_factory=lambda: {"interactive": 0.0, "batch": 0.0})
    served: dict[str, int] = field(default_factory=lambda: {"interactive": 0, "batch": 0})
    started: float = field(default_factory=time.monotonic)

    async def acquire(self, priority: int) -> None:
        if self.running < self.slots and not self.waiting:
            self.running += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        rank = priority if self.priority_policy else 0
        heapq.heappush(self.waiting, (rank, next(self.order), waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # granted as the client left: hand it on
            else:
                self.waiting = [w for w in self.waiting if w[2] is not waiter]
                heapq.heapify(self.waiting)
            raise

    def release(self) -> None:
        while self.waiting:
            _, _, waiter = heapq.heappop(self.waiting)
            if not waiter.done():
                waiter.set_result(None)  # the slot passes to it: `running` is unchanged
                return
        self.running -= 1


def _chunk(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def make_app(slots: Slots, *, prefill_s: float, token_s: float, default_tokens: int) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        priority = body.get("priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool):
            return web.json_response({"error": {"message": "priority: not an integer"}}, status=400)
        if priority and not slots.priority_policy:
            return web.json_response(
                {"error": {"message": "priority other than 0 needs --scheduling-policy priority"}},
                status=400,
            )
        tokens = int(body.get("max_tokens") or default_tokens)
        kind = "batch" if priority > 0 else "interactive"
        model = body.get("model", "bench")
        await slots.acquire(priority)
        began = time.monotonic()
        try:
            await asyncio.sleep(prefill_s)
            usage = {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": 8 + tokens}
            if not body.get("stream"):
                await asyncio.sleep(tokens * token_s)
                return web.json_response(
                    {
                        "id": "chatcmpl-slot",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": model,
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": "x " * tokens},
                                "finish_reason": "length",
                            }
                        ],
                        "usage": usage,
                    }
                )
            response = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await response.prepare(request)
            base = {"id": "chatcmpl-slot", "object": "chat.completion.chunk", "model": model}
            role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
            await response.write(_chunk({**base, "choices": [role]}))
            for n in range(tokens):
                last = n == tokens - 1
                choice = {"index": 0, "delta": {"content": "x "}, "finish_reason": "length" if last else None}
                await response.write(_chunk({**base, "choices": [choice]}))
                if not last:
                    await asyncio.sleep(token_s)
            if (body.get("stream_options") or {}).get("include_usage"):
                await response.write(_chunk({**base, "choices": [], "usage": usage}))
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response
        finally:
            slots.busy_s[kind] += time.monotonic() - began
            slots.served[kind] += 1
            slots.release()

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "bench", "object": "model"}]})

    async def metrics(request: web.Request) -> web.Response:
        text = (
            f"vllm:num_requests_running {slots.running}\n"
            f"vllm:num_requests_waiting {len(slots.waiting)}\n"
            "vllm:kv_cache_usage_perc 0\n"
        )
        return web.Response(text=text)

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "slots": slots.slots,
                "elapsed_s": time.monotonic() - slots.started,
                "busy_s": slots.busy_s,
                "served": slots.served,
            }
        )

    app = web.Application(client_max_size=16 << 20)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/stats", stats)
    return app


async def serve(args: argparse.Namespace) -> None:
    slots = Slots(args.slots, args.policy == "priority")
    app = make_app(
        slots, prefill_s=args.prefill_ms / 1000, token_s=args.token_ms / 1000, default_tokens=args.tokens
    )
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))  # 0: a free port, named in the READY line
    await web.SockSite(runner, sock).start()
    print(f"READY {sock.getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--policy", choices=("fcfs", "priority"), default="priority")
    parser.add_argument("--prefill-ms", type=float, default=20.0)
    parser.add_argument("--token-ms", type=float, default=5.0)
    parser.add_argument(
        "--tokens", type=int, default=32, help="a request's tokens when it sets no max_tokens"
    )
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
