"""The OpenTelemetry OTLP/HTTP span exporter's internals, used by gateway/observability/otlp_encoding.py
to send spans it encoded itself. Pinned in pyproject.toml (the exporter, the SDK, and
opentelemetry-proto, which tests decode the export with) to the minor version
tests/seams/test_otlp.py checked.

What it relies on, and why: `OTLPSpanExporter._client` (the HTTP client that posts one encoded
request, with the exporter's endpoint, headers, TLS, compression and retries) and its `export(bytes)`
returning a response with `.success`, and `OTLPSpanExporter._shutdown`. The SDK's own encoder
builds a protobuf object per span, attribute, value and event, about 270 k instructions a span
against about 100 k for the gateway's encoder; everything on the wire past the encoding stays the
exporter's.

Imported only when tracing is on (it imports the SDK).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

# What tests/seams/test_otlp.py checks on an exporter of the installed release.
PRIVATES = ("_client", "_shutdown")


class EncodedSpanExporter(OTLPSpanExporter):
    """The SDK's OTLP/HTTP exporter, with a way to send an ExportTraceServiceRequest already
    encoded."""

    def send_encoded(self, body: bytes) -> SpanExportResult:
        if self._shutdown:
            return SpanExportResult.FAILURE
        send: Callable[[bytes], Any] = self._client.export
        return SpanExportResult.SUCCESS if send(body).success else SpanExportResult.FAILURE
