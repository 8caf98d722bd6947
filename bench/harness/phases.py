"""The gateway's request path split into phases, from py-spy's collapsed stacks.

Each sample goes to the first phase (in the order of `RULES`) one of whose frames is anywhere on
its stack: the cross-cutting phases (tracing, metrics, the access log) come first, so a Prometheus
call made while settling is metrics, not settle; then the pipeline's steps by the gateway function
that is each one's entry; then the libraries whose work runs in event-loop callbacks outside any
gateway frame (aiohttp's reads, for side calls); the HTTP server last, since uvicorn's
frames sit at the root of every request's stack. What matches nothing is the event loop and the
rest. Shares of samples times instructions per request (callgrind) give instructions per phase.
"""

from __future__ import annotations

from collections import Counter

# (phase, [(path fragment, function name or "" for any function in that file)]).
RULES: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "tracing",
        (
            ("gateway/observability/tracing.py", ""),
            ("gateway/observability/request_trace.py", ""),
            ("opentelemetry/", ""),
        ),
    ),
    ("metrics", (("gateway/observability/metrics.py", ""), ("prometheus_client/", ""))),
    (
        "access log",
        (
            ("gateway/observability/logs.py", ""),
            ("gateway/edge/middleware.py", "_finish"),
            ("gateway/edge/middleware.py", "_fields"),
            ("/logging/", ""),
        ),
    ),
    ("settle", (("gateway/proxy/settlement.py", ""), ("gateway/metering/", ""))),
    ("authenticate", (("gateway/proxy/gate.py", "caller"), ("gateway/keys/", ""))),
    (
        "relay",  # the answer's way out: under it, the client's socket writes (uvicorn's send)
        (
            ("gateway/proxy/whole_answer.py", ""),
            ("gateway/proxy/relay.py", ""),
            ("gateway/proxy/sse.py", ""),
            ("gateway/proxy/translation/ignored.py", "send_with_ignored"),
            ("gateway/edge/middleware.py", "send_with_id"),
        ),
    ),
    (
        "parse",
        (
            ("gateway/http/body.py", ""),
            ("gateway/proxy/parsing.py", ""),
            ("gateway/proxy/translation/", ""),
            ("gateway/proxy/prompt_count.py", ""),
        ),
    ),
    (
        "admit",
        (
            ("gateway/limits/", ""),
            ("gateway/proxy/output_caps.py", ""),
            ("gateway/proxy/cache_salt.py", ""),
        ),
    ),
    (
        "route",
        (
            ("gateway/routing/", ""),
            ("gateway/proxy/gate.py", "model"),
            ("gateway/proxy/worker_plan.py", "route"),
            ("gateway/proxy/worker_plan.py", "prompt_blocks"),
            ("gateway/proxy/admitted.py", "share_ticket"),
        ),
    ),
    (
        "worker call",
        (
            ("gateway/proxy/upstream.py", ""),
            ("gateway/worker/client.py", ""),
            ("gateway/worker/connection.py", ""),
            ("gateway/worker/http.py", ""),
            ("gateway/proxy/forwarding.py", ""),
            ("aiohttp/", ""),
        ),
    ),
    (
        "relay",  # the client API's answer: rendered by its dialect
        (
            ("gateway/proxy/usage.py", ""),
            ("gateway/apis/openai/", ""),
            ("gateway/apis/anthropic/", ""),
            ("gateway/apis/responses/", ""),
            ("gateway/apis/gemini/", ""),
            ("gateway/proxy/disconnect.py", ""),
        ),
    ),
    ("Redis replies (admit, settle)", (("redis/", ""),)),
    (
        "accept, HTTP, middleware",
        (
            ("uvicorn/protocols/", ""),
            ("starlette/", ""),
            ("gateway/edge/", ""),
            ("gateway/apis/endpoint.py", ""),
            ("gateway/proxy/pipeline.py", ""),
        ),
    ),
)
PHASES = tuple(dict.fromkeys(phase for phase, _ in RULES))
# A sample whose leaf is the event loop's own C code (uvloop: polling, its callbacks' C part) is
# mostly time in the kernel, which callgrind does not count: left out of the shares.
LOOP_LEAF = ("asyncio/runners.py", "run")
OTHER = "event loop and other"


def _frame(frame: str) -> tuple[str, str]:
    """'handle (/x/gateway/edge/api.py:67)' -> ('/x/gateway/edge/api.py', 'handle')."""
    at = frame.rfind(" (")
    if at < 0:
        return frame, ""
    return frame[at + 2 : -1].rsplit(":", 1)[0], frame[:at].rsplit(".", 1)[-1]


def phase_of(frames: list[tuple[str, str]]) -> str:
    for phase, matchers in RULES:
        for path, function in frames:
            for fragment, name in matchers:
                if fragment in path and (not name or name == function):
                    return phase
    return OTHER


def phase_shares(collapsed: str) -> dict[str, float]:
    """Each phase's share of the non-idle samples of py-spy's raw (collapsed) output, but those
    in the event loop's own C code; 'samples': how many were shared, 'loop samples': how many not."""
    counts: Counter[str] = Counter()
    loop = 0
    for line in collapsed.splitlines():
        stack, _, count_raw = line.rpartition(" ")
        if not stack or not count_raw.isdigit():
            continue
        frames = [_frame(f) for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        path, function = frames[-1]
        if path.endswith(LOOP_LEAF[0]) and function == LOOP_LEAF[1]:
            loop += int(count_raw)
        else:
            counts[phase_of(frames)] += int(count_raw)
    total = sum(counts.values())
    shares: dict[str, float] = {phase: k / total for phase, k in counts.items()} if total else {}
    shares["samples"] = float(total)
    shares["loop samples"] = float(loop)
    return shares
