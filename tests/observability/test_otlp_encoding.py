"""The hand-written OTLP encoder (gateway/observability/otlp_encoding.py) writes the message the
SDK's own encoder builds: spans recorded by the real SDK, encoded both ways, parsed back with the
official protobuf classes and compared whole."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)

from gateway.observability.otlp_encoding import encode
from gateway.observability.span_recorder import Recorder


class _Kept(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def _recorded() -> list[ReadableSpan]:
    kept = _Kept()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "sluicegate", "service.version": "9"})
    )
    provider.add_span_processor(SimpleSpanProcessor(kept))
    tracer = provider.get_tracer("sluicegate", "9")
    remote = SpanContext(
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("vendor", "opaque"), ("b", "2")]),
    )
    server = tracer.start_span(
        "POST /v1/chat/completions",
        context=set_span_in_context(NonRecordingSpan(remote)),
        kind=SpanKind.SERVER,
    )
    server.add_event("authenticate")
    server.add_event("settle", {"error.type": "redis_unavailable"})
    child = tracer.start_span("admit", context=set_span_in_context(server))
    child.set_attributes({"error.type": "rate_limit_exceeded"})
    child.set_status(Status(StatusCode.ERROR, "refused"))
    child.end()
    attempt = tracer.start_span(
        "chat m",
        context=set_span_in_context(server),
        kind=SpanKind.CLIENT,
        links=[Link(remote, {"why": "x"})],
    )
    attempt.add_event("first_token", {"n": 3, "ok": True, "ratio": 0.5}, timestamp=1_700_000_000_123_456_789)
    attempt.end()
    server.set_attributes(
        {
            "http.response.status_code": 200,
            "gen_ai.usage.input_tokens": 0,
            "negative": -5,
            "big": 2**62,
            "sluicegate.team": "tëam ✓",
            "flag": False,
            "ratio": 1.25,
            "gen_ai.response.finish_reasons": ("stop", "length"),
            "counts": (1, 2, 300),
            "empty": "",
        }
    )
    server.set_status(Status(StatusCode.OK))
    server.end()
    root = tracer.start_span("GET", kind=SpanKind.INTERNAL)  # a new trace: no parent, no status set
    root.end()
    return kept.spans


def test_the_message_is_the_sdk_encoders_field_for_field() -> None:
    spans = _recorded()
    assert len(spans) == 4
    ours = ExportTraceServiceRequest.FromString(encode(spans))
    assert ours == encode_spans(spans)
    # Not vacuous: the parsed message holds every span with its attributes and events.
    encoded = ours.resource_spans[0].scope_spans[0].spans
    assert [span.name for span in encoded] == ["admit", "chat m", "POST /v1/chat/completions", "GET"]
    assert len(encoded[2].attributes) == 10
    assert [event.name for event in encoded[2].events] == ["authenticate", "settle"]


def test_an_empty_batch_is_an_empty_message() -> None:
    assert encode([]) == b""
    assert ExportTraceServiceRequest.FromString(b"") == encode_spans([])


def test_the_gateways_recorded_spans_encode_alike_and_freeze_at_their_end() -> None:
    """The spans the gateway records itself (span_recorder.py) reach the processor as the SDK's
    ReadableSpans, encode the same both ways, and take no change once ended (the export thread
    reads them from then on)."""
    kept = _Kept()
    recorder = Recorder(
        SimpleSpanProcessor(kept), Resource.create({"service.name": "sluicegate"}), InstrumentationScope("sg")
    )
    server = recorder.root("POST", 0xABC, None)
    attempt = recorder.client(server, "chat m", {"server.port": 8000})
    attempt.add_event("first_byte")
    attempt.end()
    attempt.set_attribute("late", 1)
    attempt.add_event("late")
    server.set_attributes({"http.response.status_code": 200})
    server.end()
    assert [span.name for span in kept.spans] == ["chat m", "POST"]
    first = kept.spans[0]
    assert dict(first.attributes or {}) == {"server.port": 8000}
    assert [event.name for event in first.events] == ["first_byte"]
    assert first.parent is not None
    assert first.parent.span_id == server.get_span_context().span_id
    assert ExportTraceServiceRequest.FromString(encode(kept.spans)) == encode_spans(kept.spans)
