"""A worker's own load, read from its Prometheus `/metrics` (workers/CONTRACT.md, "Load metrics").

Only three names matter, summed over their label sets (vLLM adds an `engine` label). A tiny line
parser: the full text parser would build every other metric the worker exports, once a second per
endpoint, for nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.routing.endpoint import Endpoint

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_CACHE = "vllm:kv_cache_usage_perc"
_NAMES = (RUNNING, WAITING, KV_CACHE)

# A request already queued in the engine costs more than one being generated: it waits for one to
# finish first. KV use (0..1) only breaks ties between equally busy endpoints.
WAITING_WEIGHT = 4.0


@dataclass(frozen=True, slots=True)
class Load:
    running: float
    waiting: float
    kv_cache_usage: float


def parse_load(text: str) -> Load | None:
    """None when the text has neither the running nor the waiting gauge."""
    sums = {name: 0.0 for name in _NAMES}
    seen: set[str] = set()
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        for name in _NAMES:
            if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
                value = _sample_value(line, len(name))
                if value is not None:
                    sums[name] += value
                    seen.add(name)
                break
    if RUNNING not in seen and WAITING not in seen:
        return None
    # KV use is per engine: the busiest one is what matters, and a sum could pass 1.
    return Load(sums[RUNNING], sums[WAITING], min(sums[KV_CACHE], 1.0))


def _sample_value(line: str, name_end: int) -> float | None:
    rest = line[name_end:]
    if rest.startswith("{"):
        close = rest.rfind("}")
        if close < 0:
            return None
        rest = rest[close + 1 :]
    parts = rest.split()
    if not parts:
        return None
    try:
        value = float(parts[0])
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def apply_load(endpoint: Endpoint, load: Load, now: float) -> None:
    endpoint.running = round(load.running)
    endpoint.waiting = round(load.waiting)
    endpoint.kv_cache_usage = load.kv_cache_usage
    endpoint.scraped_at = now
    # The engine's counts include what this replica had in flight at the scrape, and the policies
    # add the in-flight count of the moment: subtract the former so it is not counted twice. Never
    # below 0: a request can be in flight here and not yet (or no longer) counted there, and a
    # negative base would pull traffic onto this endpoint until the next scrape.
    engine = WAITING_WEIGHT * load.waiting + load.running + load.kv_cache_usage
    endpoint.load_base = max(engine - endpoint.inflight, 0.0)


def forget_load(endpoint: Endpoint) -> None:
    """A failed or stale scrape: back to in-flight counts only."""
    endpoint.running = endpoint.waiting = 0
    endpoint.kv_cache_usage = 0.0
    endpoint.scraped_at = None
    endpoint.load_base = 0.0
