"""`python harness/ttft_marks.py <python> -m gateway serve ...`: the gateway, with a timestamp at
each step of every API request on its way to the first token, for `ttft_bench.py`.

It wraps (in this process only, nothing of it in the gateway's code) the request's entry, the
admission call, the worker call up to its answer's head, the relay's first batch of worker events
that carries generated text, and the client's send of that text, and keeps each request's times
(`time.perf_counter`). SIGUSR1 writes the requests kept since the last signal as JSON to
`$SLUICEGATE_TTFT_MARKS` and forgets them.
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

import gateway.limits.admission as admission
import gateway.proxy.pipeline as pipeline
import gateway.proxy.relay as relay
import gateway.proxy.upstream as upstream

# The marks, in the order a request reaches them.
MARKS = ("in", "admit0", "admit1", "open0", "open1", "first_in", "out0", "out1")
# A chat chunk with generated text (the role chunk's "content":"" is none).
_TEXT = re.compile(rb'"content":"[^"]')
_REQUEST: contextvars.ContextVar[dict[str, float] | None] = contextvars.ContextVar("ttft", default=None)
_KEPT: list[dict[str, float]] = []


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
        out = process(self, *args)
        if out.out and _TEXT.search(out.out):
            _mark("first_in")
        return out

    relay.StreamRelay._process = timed  # type: ignore[method-assign,assignment]


def _dump(signum: int, frame: FrameType | None) -> None:
    with open(os.environ["SLUICEGATE_TTFT_MARKS"], "w", encoding="utf-8") as out:
        json.dump(_KEPT, out)
    _KEPT.clear()


def main() -> None:
    _wrap_serve()
    _wrap_async(admission.RateLimiter, "admit", "admit0", "admit1")
    _wrap_async(upstream.Upstream, "open", "open0", "open1")
    _wrap_process()
    signal.signal(signal.SIGUSR1, _dump)
    argv = sys.argv[1:]
    at = argv.index("-m")
    sys.argv = [argv[at + 1], *argv[at + 2 :]]
    runpy.run_module(argv[at + 1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
