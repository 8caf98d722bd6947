"""Event-loop time one huge-but-legal body costs, before and after the body bounds (issue 23).

The body: 240,000 short messages (8-10 MB, as the review's 8.7 MB), under the 10 MiB byte limit.
What the event loop spends on it is synchronous work in the request path: the dialect's parse
(open the JSON, check, translate) and, for a body that passes, building the worker's body; a body
refused by a bound costs the JSON open and the count. Both are timed with the process's CPU clock
in this one thread, the median of a few runs per client API ("unbounded" is the gateway before the
bounds: bounds far above the body). What is left once refused is the JSON open itself, mostly the
cyclic garbage collector walking the fresh objects (Gemini's nested parts most): no bound avoids it.

    .venv/bin/python bench/body_bounds_bench.py
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson

from gateway.apis import ClientApi, anthropic, gemini, openai, responses
from gateway.apis.anthropic.dialect import MessagesDialect
from gateway.apis.gemini.dialect import GeminiDialect
from gateway.apis.openai.dialect import CHAT
from gateway.apis.responses.dialect import ResponsesDialect
from gateway.errors import GatewayError
from gateway.proxy.translation.bounds import BodyBounds

MESSAGES = 240_000
RUNS = 5
UNBOUNDED = BodyBounds(10**9, 10**9, 10**9)


def _bounded(api: ClientApi) -> BodyBounds:
    return BodyBounds(lists=api.body_lists)


def _msgs() -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": "hi"} for i in range(MESSAGES - 1)] + [
        {"role": "user", "content": "hi"}
    ]


def _bodies() -> dict[str, tuple[Any, bytes, BodyBounds]]:
    """Each API's dialect, a huge body, and the default bounds with that API's lists."""
    msgs = _msgs()
    contents = [
        {"role": "user" if m["role"] == "user" else "model", "parts": [{"text": m["content"]}]} for m in msgs
    ]
    return {
        "chat": (CHAT, orjson.dumps({"model": "m", "messages": msgs}), _bounded(openai.API)),
        "messages": (
            MessagesDialect(),
            orjson.dumps({"model": "m", "max_tokens": 16, "messages": msgs}),
            _bounded(anthropic.API),
        ),
        "responses": (
            ResponsesDialect(),
            orjson.dumps({"model": "m", "input": msgs}),
            _bounded(responses.API),
        ),
        "gemini": (
            GeminiDialect.of("m", streaming=False, sse=False),
            orjson.dumps({"contents": contents}),
            _bounded(gemini.API),
        ),
    }


def _once(dialect: Any, body: bytes, bounds: BodyBounds) -> tuple[float, str]:
    start = time.process_time()
    try:
        call = dialect.parse(body, (), bounds)
        call.worker_body("m", continuous_usage=True, max_tokens=16, cache_salt=None)
        verdict = "answered"
    except GatewayError as error:
        verdict = f"400 {error.code.value[0]}" if error.status == 400 else str(error.status)
    return time.process_time() - start, verdict


def _median(run: Callable[[], tuple[float, str]]) -> tuple[float, str]:
    results = [run() for _ in range(RUNS)]
    return statistics.median(r[0] for r in results), results[-1][1]


def main() -> None:
    print(f"{'api':<10} {'body MB':>8} {'unbounded s':>12}  {'bounded s':>10}  verdicts")
    for name, (dialect, body, bounded) in _bodies().items():
        before, was = _median(functools.partial(_once, dialect, body, UNBOUNDED))
        after, verdict = _median(functools.partial(_once, dialect, body, bounded))
        print(f"{name:<10} {len(body) / 1e6:>8.1f} {before:>12.3f}  {after:>10.3f}  {was} -> {verdict}")


if __name__ == "__main__":
    main()
