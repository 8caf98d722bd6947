"""What the worker saw: per-request records for tests, and vLLM-named gauges for /metrics."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import orjson

State = Literal["running", "completed", "disconnected", "failed"]

MAX_RECORDS = 2000


class RequestRecord:
    """One received request; `state` and `tokens_sent` change while it is being answered.

    state: "completed" when a success was delivered in full, "failed" when the worker answered with
    an error (status, error event or an aborted connection), "disconnected" when the client left
    first.
    """

    __slots__ = ("body", "headers", "path", "request_id", "state", "status", "tokens_sent")

    def __init__(self, request_id: str, path: str, headers: dict[str, str], body: Any) -> None:
        self.request_id = request_id
        self.path = path
        self.headers = headers
        self.body = body
        self.state: State = "running"
        self.status: int | None = None
        self.tokens_sent = 0

    def finish(self, state: State, status: int | None = None) -> None:
        self.state = state
        if status is not None:
            self.status = status

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "request_id": self.request_id,
                "path": self.path,
                "headers": self.headers,
                "body": self.body,
                "state": self.state,
                "status": self.status,
                "tokens_sent": self.tokens_sent,
            }
        )


class RequestRecords:
    """The last `limit` records by request id; a reused id replaces the older record."""

    def __init__(self, limit: int = MAX_RECORDS) -> None:
        self._limit = limit
        self._records: OrderedDict[str, RequestRecord] = OrderedDict()

    def add(self, record: RequestRecord) -> None:
        # Behind the gateway, x-request-id is the gateway's id; a test knows the request by the
        # id it sent, which arrives as x-client-request-id: the record answers to both.
        for request_id in {record.request_id, record.headers.get("x-client-request-id") or record.request_id}:
            self._records.pop(request_id, None)
            self._records[request_id] = record
        while len(self._records) > self._limit:
            self._records.popitem(last=False)

    def get(self, request_id: str) -> RequestRecord | None:
        return self._records.get(request_id)

    def __len__(self) -> int:
        return len(self._records)


class RunningGauge:
    """In-flight generations per served model, exposed under vLLM's metric names."""

    def __init__(self, model_names: Sequence[str]) -> None:
        self._running = dict.fromkeys(model_names, 0)

    @contextmanager
    def track(self, model: str) -> Iterator[None]:
        self._running[model] += 1
        try:
            yield
        finally:
            self._running[model] -= 1

    def render(self) -> bytes:
        lines: list[str] = []
        gauges = (
            ("vllm:num_requests_running", "Number of requests in model execution batches."),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
        )
        for name, help_text in gauges:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
            for model, running in self._running.items():
                value = float(running) if name == "vllm:num_requests_running" else 0.0
                lines.append(f'{name}{{model_name="{_label(model)}"}} {value}')
        return ("\n".join(lines) + "\n").encode()


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
