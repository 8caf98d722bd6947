"""gateway/seams/otlp.py against the installed OTLP/HTTP exporter: the private client and flag it
sends through are there on an exporter, and an encoded request goes out through them to a real
receiver on a socket."""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from opentelemetry.sdk.trace.export import SpanExportResult

from gateway.seams import otlp
from tests.observability.otlp_receiver import otlp_receiver
from tests.seams.names import assert_present

EXPORTER = "opentelemetry-exporter-otlp-proto-http"


def test_an_exporter_has_the_client_and_flag_the_seam_uses() -> None:
    exporter = otlp.EncodedSpanExporter(endpoint="http://127.0.0.1:1/v1/traces")
    try:
        assert_present(EXPORTER, exporter, otlp.PRIVATES)
        assert_present(EXPORTER, exporter._client, ["export"])
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]


def test_an_encoded_request_reaches_the_receiver_and_none_after_shutdown() -> None:
    span = Span(trace_id=b"\1" * 16, span_id=b"\2" * 8, name="probe")
    body = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])]
    ).SerializeToString()
    with otlp_receiver() as (url, receiver):
        exporter = otlp.EncodedSpanExporter(endpoint=url)
        assert exporter.send_encoded(body) is SpanExportResult.SUCCESS
        assert [s.name for s in receiver.spans] == ["probe"]
        exporter.shutdown()  # type: ignore[no-untyped-call]
        assert exporter.send_encoded(body) is SpanExportResult.FAILURE
        assert receiver.requests == 1
