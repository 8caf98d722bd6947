"""`python harness/ttft_marks.py <python> -m gateway serve ...`: the gateway, with a timestamp at
each step of every API request on its way to the first token, for `ttft_bench.py`.

It wraps (in this process only, nothing of it in the gateway's code) the request's entry, the
admission call (and inside it the script call's write to Redis, its reply's arrival and the call's
resumption), the worker call up to its answer's head, the relay's first batch of worker events
that carries generated text, and the client's send of that text, and keeps each request's times
(`time.perf_counter`). Between the reply's arrival and the call's resumption it also counts the
batches of worker events the relays processed (other streams' work the call waited behind) and the
CPU time the gateway's thread used (`time.thread_time`: the loop busy, or waiting). SIGUSR1 writes
the requests kept since the last signal as JSON to `$SLUICEGATE_TTFT_MARKS` and forgets them.
"""

from __future__ import annotations

import contextvars
import json
import os
import re
import runpy
import signal
import sys
import time
from types import FrameType
from typing import Any

import gateway.limits.limiter as limiter
import gateway.proxy.pipeline as pipeline
import gateway.proxy.relay as relay
import gateway.proxy.upstream as upstream
import gateway.redis.lean as lean

# The marks, in the order a request reaches them.
MARKS = (
    *("in", "admit0", "redis_w", "redis_r", "redis_resumed", "admit1"),
    *("open0", "open1", "first_in", "out0", "out1"),
)
# A chat chunk with generated text (the role chunk's "content":"" is none).
_TEXT = re.compile(rb'"content":"[^"]')
_REQUEST: contextvars.ContextVar[dict[str, float] | None] = contextvars.ContextVar("ttft", default=None)
_KEPT: list[dict[str, float]] = []
# Batches of worker events processed by the relays, all streams together.
_RELAYED = [0]


def _mark(name: str) -> None:
    marks = _REQUEST.get()
    if marks is not None and name not in marks:
        marks[name] = time.perf_counter()


def _marking(send: Any) -> Any:
    """`send`, marking the request's first send of generated text (its start and its end)."""

    async def send_marked(message: Any) -> None:
        marks = _REQUEST.get()
        body = message.get("body", b"") if message["type"] == "http.response.body" else b""
        if marks is None or "out0" in marks or not _TEXT.search(body):
            await send(message)
            return
        marks["out0"] = time.perf_counter()
        await send(message)
        marks["out1"] = time.perf_counter()

    return send_marked


def _wrap_serve() -> None:
    serve = pipeline.Pipeline.serve

    async def timed(self: Any, dialect: Any, scope: Any, receive: Any, send: Any) -> None:
        marks = {"in": time.perf_counter()}
        _REQUEST.set(marks)
        try:
            await serve(self, dialect, scope, receive, _marking(send))
        finally:
            _KEPT.append(marks)

    pipeline.Pipeline.serve = timed  # type: ignore[method-assign]
    if hasattr(relay, "direct_send"):
        # A stream's events go to the server's own send, past the middleware (and `serve`'s send).
        direct = relay.direct_send
        relay.direct_send = lambda scope, send: _marking(direct(scope, send))


def _wrap_async(owner: Any, name: str, before: str, after: str) -> None:
    original = getattr(owner, name)

    async def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        _mark(before)
        try:
            return await original(self, *args, **kwargs)
        finally:
            _mark(after)

    setattr(owner, name, timed)


def _wrap_process() -> None:
    process = relay.StreamRelay._process

    def timed(self: Any, *args: Any) -> Any:
        _RELAYED[0] += 1
        out = process(self, *args)
        if out.out and _TEXT.search(out.out):
            _mark("first_in")
        return out

    relay.StreamRelay._process = timed  # type: ignore[method-assign,assignment]


def _wrap_redis() -> None:
    """The script call: its write to Redis, its reply's arrival (a protocol callback, outside the
    request's context) and the call's resumption."""
    call, received = lean._Reply.call, lean._Reply.data_received

    async def call_marked(self: Any, packed: bytes) -> Any:
        _mark("redis_w")
        marks = self.ttft_marks = _REQUEST.get()
        try:
            return await call(self, packed)
        finally:
            self.ttft_marks = None
            if marks is not None and "redis_r" in marks and "redis_resumed" not in marks:
                marks["redis_resumed"] = time.perf_counter()
                marks["relayed_waiting"] = _RELAYED[0] - marks["relayed_waiting"]
                marks["cpu_waiting"] = time.thread_time() - marks["cpu_waiting"]

    def received_marked(self: Any, data: bytes) -> None:
        marks = getattr(self, "ttft_marks", None)
        if marks is not None and "redis_r" not in marks:
            marks["redis_r"] = time.perf_counter()
            marks["relayed_waiting"], marks["cpu_waiting"] = _RELAYED[0], time.thread_time()
        received(self, data)

    lean._Reply.call = call_marked  # type: ignore[method-assign]
    lean._Reply.data_received = received_marked  # type: ignore[method-assign]


def _dump(signum: int, frame: FrameType | None) -> None:
    with open(os.environ["SLUICEGATE_TTFT_MARKS"], "w", encoding="utf-8") as out:
        json.dump(_KEPT, out)
    _KEPT.clear()


def main() -> None:
    _wrap_serve()
    _wrap_async(limiter.RateLimiter, "admit", "admit0", "admit1")
    _wrap_async(upstream.Upstream, "open", "open0", "open1")
    _wrap_process()
    _wrap_redis()
    signal.signal(signal.SIGUSR1, _dump)
    argv = sys.argv[1:]
    at = argv.index("-m")
    sys.argv = [argv[at + 1], *argv[at + 2 :]]
    runpy.run_module(argv[at + 1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
