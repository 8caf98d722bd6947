"""`/metrics` of one worker: vLLM's load gauges (what the gateway routes and KEDA scales on) and
Reframr's own streaming facts. One registry per app, so two workers in one process never mix.

- `vllm:num_requests_running{model_name}`: 1 while a generation holds the engine, else 0.
- `vllm:num_requests_waiting{model_name}`: admitted requests queued behind it.
- `vllm:kv_cache_usage_perc` is not exported: Reframr is recurrent and has no KV cache, and a
  constant 0 would tell a router "plenty of room" when the queue may be full.
- `reframr_streaming_mode{model_name,mode="token"|"buffered"}`: 1 for the engine's mode (both 0
  while loading). "buffered" means the text is cut into chunks only after the whole generation.
- `reframr_time_to_first_token_seconds{model_name}`: from admission (queue wait included, as
  vLLM's TTFT is) to the first text the engine hands over; in buffered mode that is the whole
  generation, and the histogram says so rather than timing the first chunk sent.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)


def _is_mode(mode: Callable[[], str | None], name: str) -> float:
    return float(mode() == name)


class WorkerMetrics:
    def __init__(
        self,
        model_name: str,
        running: Callable[[], int],
        waiting: Callable[[], int],
        mode: Callable[[], str | None],
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["model_name"]
        Gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            labels,
            registry=self.registry,
        ).labels(model_name).set_function(running)
        Gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            labels,
            registry=self.registry,
        ).labels(model_name).set_function(waiting)
        streaming = Gauge(
            "reframr_streaming_mode",
            "1 for how this worker streams: token (as generated) or buffered (after generation).",
            ["model_name", "mode"],
            registry=self.registry,
        )
        for name in ("token", "buffered"):
            streaming.labels(model_name, name).set_function(partial(_is_mode, mode, name))
        self.ttft = Histogram(
            "reframr_time_to_first_token_seconds",
            "Admission to the first generated text; equals generation time in buffered mode.",
            labels,
            buckets=_TTFT_BUCKETS,
            registry=self.registry,
        ).labels(model_name)

    def render(self) -> bytes:
        return generate_latest(self.registry)
