"""HTTP helpers for the Reframr worker tests, over a real loopback socket."""

from __future__ import annotations

import http.client
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

MODEL = "reframr-test"


def connect(base_url: str, timeout: float = 5.0) -> http.client.HTTPConnection:
    parts = urlsplit(base_url)
    assert parts.hostname is not None
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)


def send(
    conn: http.client.HTTPConnection, path: str, body: Any, headers: dict[str, str] | None = None
) -> None:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    conn.request("POST", path, body=data, headers={"content-type": "application/json", **(headers or {})})


def call(
    base_url: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = connect(base_url)
    try:
        if method == "POST":
            send(conn, path, body, headers)
        else:
            conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def sse_chunks(raw: bytes) -> list[dict[str, Any]]:
    """The JSON chunks of a complete SSE body, checking vLLM's framing on the way."""
    events = raw.split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""], raw[-80:]
    chunks = []
    for event in events[:-2]:
        assert event.startswith(b"data: "), event
        payload = event[len(b"data: ") :]
        assert orjson.dumps(orjson.loads(payload)) == payload, "not compact JSON"
        chunks.append(orjson.loads(payload))
    return chunks


def wait_for(predicate: Callable[[], bool], timeout_s: float = 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout_s}s")
        time.sleep(0.01)


def metric(base_url: str, name: str, **labels: str) -> float | None:
    status, _, raw = call(base_url, "GET", "/metrics")
    assert status == 200
    for family in text_string_to_metric_families(raw.decode()):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}
