"""A small HTTP client on real sockets that keeps what a conformance check needs to see.

`http.client` from the standard library: the exact response bytes (SSE framing is a rule), every
header (content-length on a stream is a rule), and a connection the suite can drop mid-generation
(disconnect handling is a rule). No retries, no redirects, nothing parsed away.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

JSONObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Worker:
    url: str
    model: str
    timeout_s: float = 60.0

    @property
    def host(self) -> str:
        host = urlsplit(self.url).hostname
        if host is None:
            raise ValueError(f"worker URL without a host: {self.url}")
        return host

    @property
    def port(self) -> int:
        parts = urlsplit(self.url)
        return parts.port or (443 if parts.scheme == "https" else 80)

    @property
    def base_path(self) -> str:
        return urlsplit(self.url).path.rstrip("/")

    def connect(self, timeout_s: float | None = None) -> http.client.HTTPConnection:
        timeout = self.timeout_s if timeout_s is None else timeout_s
        if urlsplit(self.url).scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    """Lower-cased names; repeated headers joined with ", "."""
    body: bytes
    elapsed_s: float
    complete: bool = True
    """False when the body did not end properly (timeout, dropped connection, bad chunking)."""
    problem: str | None = None

    def json(self) -> Any:
        return json.loads(self.body)

    def json_or_none(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def brief(self, limit: int = 300) -> str:
        text = self.body[:limit].decode("utf-8", "replace")
        more = "..." if len(self.body) > limit else ""
        return f"HTTP {self.status} {text!r}{more}"


def _headers(response: http.client.HTTPResponse) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in response.getheaders():
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


def send(
    worker: Worker,
    method: str,
    path: str,
    body: JSONObject | bytes | None = None,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> http.client.HTTPConnection:
    """Open a connection and send one request; the caller reads (or drops) the answer."""
    conn = worker.connect(timeout_s)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    all_headers = {"accept": "*/*", **(headers or {})}
    if data is not None:
        all_headers.setdefault("content-type", "application/json")
    conn.request(method, worker.base_path + path, body=data, headers=all_headers)
    return conn


def call(
    worker: Worker,
    method: str,
    path: str,
    body: JSONObject | bytes | None = None,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> Reply:
    started = time.monotonic()
    conn = send(worker, method, path, body, headers=headers, timeout_s=timeout_s)
    try:
        response = conn.getresponse()
        status, got_headers = response.status, _headers(response)
        try:
            data = response.read()
        except http.client.IncompleteRead as exc:
            return Reply(
                status, got_headers, exc.partial, time.monotonic() - started, False, f"incomplete: {exc}"
            )
        except (TimeoutError, OSError, http.client.HTTPException) as exc:
            problem = f"the body did not end within {conn.timeout}s or broke off: {exc!r}"
            return Reply(status, got_headers, b"", time.monotonic() - started, False, problem)
        return Reply(status, got_headers, data, time.monotonic() - started)
    finally:
        conn.close()


def post(worker: Worker, path: str, body: JSONObject | bytes, **kwargs: Any) -> Reply:
    return call(worker, "POST", path, body, **kwargs)


def get(worker: Worker, path: str, **kwargs: Any) -> Reply:
    return call(worker, "GET", path, **kwargs)


# --- SSE -----------------------------------------------------------------------------------------


@dataclass
class Stream:
    """A streamed answer split into its events, with every framing problem found on the way."""

    reply: Reply
    raw_events: list[bytes] = field(default_factory=list)
    """The payload after `data: ` of every event, in order (`[DONE]` included)."""
    chunks: list[JSONObject] = field(default_factory=list)
    """The JSON object of every event before the first `[DONE]`."""
    framing_problems: list[str] = field(default_factory=list)
    done_count: int = 0
    events_after_done: int = 0
    trailing: bytes = b""
    """Bytes after the last blank line (an unterminated event)."""

    @property
    def last_event(self) -> bytes | None:
        return self.raw_events[-1] if self.raw_events else None

    @property
    def with_choices(self) -> list[JSONObject]:
        return [c for c in self.chunks if isinstance(c.get("choices"), list) and c["choices"]]


def parse_stream(reply: Reply) -> Stream:
    stream = Stream(reply)
    blocks = reply.body.split(b"\n\n")
    stream.trailing = blocks.pop()  # b"" when the body ends with a blank line
    for number, block in enumerate(blocks, 1):
        if not block.startswith(b"data: "):
            stream.framing_problems.append(f"event {number} does not start with 'data: ': {block[:80]!r}")
            continue
        payload = block[len(b"data: ") :]
        if b"\n" in payload or b"\r" in payload:
            stream.framing_problems.append(f"event {number} is more than one line: {block[:120]!r}")
        stream.raw_events.append(payload)
        if payload == b"[DONE]":
            stream.done_count += 1
            continue
        if stream.done_count:
            stream.events_after_done += 1
            continue
        try:
            chunk = json.loads(payload)
        except ValueError:
            stream.framing_problems.append(f"event {number} is not JSON: {payload[:120]!r}")
            continue
        if not isinstance(chunk, dict):
            stream.framing_problems.append(f"event {number} is not a JSON object: {payload[:120]!r}")
            continue
        stream.chunks.append(chunk)
    return stream


def stream_request(worker: Worker, path: str, body: JSONObject, **kwargs: Any) -> Stream:
    return parse_stream(post(worker, path, body, **kwargs))


# --- Prometheus text -----------------------------------------------------------------------------

_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$"
)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass
class Metrics:
    types: dict[str, str] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def for_model(self, name: str, model: str) -> list[Sample]:
        return [s for s in self.samples if s.name == name and s.labels.get("model_name") == model]

    def value(self, name: str, model: str) -> float | None:
        """The sum over `name`'s samples for `model` (other labels, e.g. vLLM's `engine`, summed)."""
        samples = self.for_model(name, model)
        return sum(s.value for s in samples) if samples else None


def _unescape(value: str) -> str:
    return value.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")


def parse_metrics(text: str) -> Metrics:
    metrics = Metrics()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                metrics.types[parts[2]] = parts[3].strip()
            continue
        match = _SAMPLE.match(line)
        if match is None:
            metrics.problems.append(f"line {number} is not a sample: {line[:120]!r}")
            continue
        labels: dict[str, str] = {}
        raw_labels = match.group("labels") or ""
        consumed = 0
        for label in _LABEL.finditer(raw_labels):
            if label.start() != consumed:
                break
            labels[label.group(1)] = _unescape(label.group(2))
            consumed = label.end()
        if consumed != len(raw_labels.rstrip()):
            metrics.problems.append(f"line {number} has malformed labels: {line[:120]!r}")
            continue
        try:
            value = float(match.group("value"))
        except ValueError:
            metrics.problems.append(f"line {number} has a non-numeric value: {line[:120]!r}")
            continue
        metrics.samples.append(Sample(match.group("name"), labels, value))
    return metrics


def finite(value: float) -> bool:
    return math.isfinite(value)


def read_metrics(worker: Worker, timeout_s: float = 5.0) -> Metrics:
    reply = get(worker, "/metrics", timeout_s=timeout_s)
    if reply.status != 200:
        raise RuntimeError(f"/metrics answered {reply.brief()}")
    return parse_metrics(reply.body.decode("utf-8", "replace"))


def wait_until(predicate: Any, timeout_s: float, interval_s: float = 0.02) -> tuple[bool, float]:
    """Poll `predicate()` until it is true or `timeout_s` passes; returns (met, when monotonic)."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = time.monotonic()
        if predicate():
            return True, now
        if now >= deadline:
            return False, now
        time.sleep(interval_s)


def close_abruptly(conn: http.client.HTTPConnection) -> None:
    """Drop the connection the way a client that gives up does (no more reads, socket closed)."""
    sock = conn.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    conn.close()


# --- named-event SSE (Anthropic Messages, OpenAI Responses) ---------------------------------------


@dataclass
class NamedStream:
    """A stream of `event: <name>\\ndata: <json>\\n\\n` events, with every framing problem found."""

    reply: Reply
    events: list[tuple[str, JSONObject]] = field(default_factory=list)
    """(the `event:` name, the JSON object of its `data:`) of every well-formed event, in order."""
    framing_problems: list[str] = field(default_factory=list)
    trailing: bytes = b""

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    def of(self, name: str) -> list[JSONObject]:
        return [payload for event, payload in self.events if event == name]


def parse_named_stream(reply: Reply) -> NamedStream:
    stream = NamedStream(reply)
    blocks = reply.body.split(b"\n\n")
    stream.trailing = blocks.pop()
    for number, block in enumerate(blocks, 1):
        lines = block.split(b"\n")
        if len(lines) != 2 or not lines[0].startswith(b"event: ") or not lines[1].startswith(b"data: "):
            stream.framing_problems.append(
                f"event {number} is not 'event: <name>' then one 'data: <json>' line: {block[:120]!r}"
            )
            continue
        name = lines[0][len(b"event: ") :].decode("utf-8", "replace")
        payload = lines[1][len(b"data: ") :]
        try:
            data = json.loads(payload)
        except ValueError:
            stream.framing_problems.append(f"event {number} ({name}) is not JSON: {payload[:120]!r}")
            continue
        if not isinstance(data, dict):
            stream.framing_problems.append(f"event {number} ({name}) is not a JSON object: {payload[:120]!r}")
            continue
        if data.get("type") != name:
            stream.framing_problems.append(
                f"event {number} is named {name!r} but its data has type {data.get('type')!r}"
            )
        stream.events.append((name, data))
    return stream


def named_stream_request(worker: Worker, path: str, body: JSONObject, **kwargs: Any) -> NamedStream:
    return parse_named_stream(post(worker, path, body, **kwargs))


class Exchanges:
    """One whole answer and one stream of an API, each asked for once and shared by its checks."""

    def __init__(self, worker: Worker, path: str, body: Callable[..., JSONObject]) -> None:
        self.worker = worker
        self._path = path
        self._body = body
        self._whole: Reply | None = None
        self._stream: NamedStream | None = None

    def whole(self) -> Reply:
        if self._whole is None:
            self._whole = post(self.worker, self._path, self._body(self.worker.model))
        return self._whole

    def stream(self) -> NamedStream:
        if self._stream is None:
            body = self._body(self.worker.model, stream=True)
            self._stream = named_stream_request(self.worker, self._path, body)
        return self._stream
