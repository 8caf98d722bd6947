"""A real OTLP/HTTP trace receiver on a loopback socket: what a collector would get from the gateway.

It accepts `POST /v1/traces` with an `ExportTraceServiceRequest` protobuf (decoded with
opentelemetry-proto, the OTLP schema itself), keeps every span as a plain `ReceivedSpan`, and lets a
test wait for the spans it expects (a condition variable: no fixed sleeps).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

SERVER = Span.SPAN_KIND_SERVER
CLIENT = Span.SPAN_KIND_CLIENT
INTERNAL = Span.SPAN_KIND_INTERNAL
STATUS_ERROR = 2  # Status.STATUS_CODE_ERROR


@dataclass
class ReceivedSpan:
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    events: list[str]
    event_times: dict[str, int]
    status: int
    start_ns: int
    end_ns: int
    resource: dict[str, Any] = field(default_factory=dict)
    event_attributes: dict[str, dict[str, Any]] = field(default_factory=dict)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    pair: KeyValue
    for pair in pairs:
        out[pair.key] = _value(pair.value)
    return out


class Receiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self.content_types: list[str] = []
        self._changed = threading.Condition()

    def take(self, body: bytes, content_type: str) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        received: list[ReceivedSpan] = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            name=span.name,
                            kind=span.kind,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes=_attributes(span.attributes),
                            events=[event.name for event in span.events],
                            event_times={event.name: event.time_unix_nano for event in span.events},
                            status=span.status.code,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            resource=resource,
                            event_attributes={
                                event.name: _attributes(event.attributes) for event in span.events
                            },
                        )
                    )
        with self._changed:
            self.requests += 1
            self.content_types.append(content_type)
            self.spans.extend(received)
            self._changed.notify_all()

    def wait_for(
        self, check: Callable[[list[ReceivedSpan]], bool], what: str, within_s: float = 20.0
    ) -> list[ReceivedSpan]:
        with self._changed:
            if not self._changed.wait_for(lambda: check(self.spans), timeout=within_s):
                raise AssertionError(f"the receiver did not get {what} within {within_s}s: {self.spans}")
            return list(self.spans)

    def trace(self, trace_id: str, *, server_spans: int = 1) -> list[ReceivedSpan]:
        """Every span of one trace, once its SERVER span(s) arrived (they end last: the middleware
        ends them after the response's last byte, when every child has ended)."""

        def complete(spans: list[ReceivedSpan]) -> bool:
            return sum(s.trace_id == trace_id and s.kind == SERVER for s in spans) >= server_spans

        return [s for s in self.wait_for(complete, f"trace {trace_id}") if s.trace_id == trace_id]

    def by_request_id(self, request_id: str) -> list[ReceivedSpan]:
        """Every span of the trace whose SERVER span is the gateway's request `request_id`."""

        def server(spans: list[ReceivedSpan]) -> ReceivedSpan | None:
            for span in spans:
                if span.kind == SERVER and span.attributes.get("sluicegate.request_id") == request_id:
                    return span
            return None

        spans = self.wait_for(lambda spans: server(spans) is not None, f"request {request_id}")
        root = server(spans)
        assert root is not None
        return [s for s in spans if s.trace_id == root.trace_id]


@contextlib.contextmanager
def otlp_receiver() -> Iterator[tuple[str, Receiver]]:
    """Yields (the traces URL to export to, the receiver)."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            receiver.take(body, self.headers.get("content-type") or "")
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def children(spans: list[ReceivedSpan], parent: ReceivedSpan) -> list[ReceivedSpan]:
    return sorted((s for s in spans if s.parent_span_id == parent.span_id), key=lambda s: s.start_ns)


def only(spans: list[ReceivedSpan], **where: Any) -> ReceivedSpan:
    found = [s for s in spans if all(getattr(s, k) == v for k, v in where.items())]
    assert len(found) == 1, (where, spans)
    return found[0]
