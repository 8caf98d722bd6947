"""Spans written as an OTLP ExportTraceServiceRequest by hand: protobuf's wire format, straight
into bytes.

The SDK's encoder builds a protobuf object for every span, attribute, value and event, which cost
more than recording the spans themselves did: counted with callgrind, about 270 k instructions a
span (the spans of tests/observability/test_otlp_encoding.py; an untraced request is about 2 M),
against about 100 k here, where each distinct KeyValue is encoded once (`MEMO_SIZE`). What it
writes is the SDK encoder's message, field for field (that test parses both and compares them);
the HTTP side (endpoint, headers, TLS, compression, retries) stays the SDK's exporter's
(`Exporter`, through gateway/seams/otlp.py, which names what of the exporter it relies on; every
tracing test exports through it to a real receiver).

Wire format: every field is a varint key (field number << 3 | wire type) then a varint, 8 or 4
little-endian bytes, or a length-prefixed body. Fields at their default value are left out, as
proto3 does.

Imported only when tracing is on (it imports the SDK).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace.export import SpanExportResult

from gateway.seams.otlp import EncodedSpanExporter

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

_FIXED64 = struct.Struct("<Q").pack
_FIXED32 = struct.Struct("<I").pack
_DOUBLE = struct.Struct("<d").pack
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200  # SpanFlags
_SMALL = tuple(bytes((n,)) for n in range(128))  # a varint below 128 is that one byte
_TAGS = tuple(bytes((n << 3 | 2,)) for n in range(16))  # a length-delimited field's key, fields 0-15
# The KeyValues a batch writes repeat (a route, a model, a team, a status): each distinct one is
# encoded once per `Exporter`, up to this many, then the memo starts over.
MEMO_SIZE = 4096


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _SMALL[value]
    if value < 0:
        value += 1 << 64  # int64: two's complement, ten bytes
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, body: bytes) -> bytes:
    """A length-delimited field (wire type 2): a string, bytes or a nested message."""
    size = len(body)
    return _TAGS[number] + (_SMALL[size] if size < 0x80 else _varint(size)) + body


def _text(number: int, value: str) -> bytes:
    return _field(number, value.encode()) if value else b""


def _value(value: Any) -> bytes:
    """An AnyValue's body."""
    if value is None:
        return b""
    if isinstance(value, str):
        return _field(1, value.encode())
    if isinstance(value, bool):  # before int: a bool is an int
        return b"\x10" + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return b"\x18" + _varint(value)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE(value)
    if isinstance(value, bytes):
        return _field(7, value)
    if isinstance(value, Sequence):
        return _field(5, b"".join(_field(1, _value(item)) for item in value))
    if isinstance(value, Mapping):
        return _field(6, _attributes(1, value, {}))
    raise TypeError(f"an attribute value of type {type(value).__name__}")


def _attributes(number: int, attributes: Mapping[str, Any] | None, memo: dict[Any, bytes]) -> bytes:
    """Each attribute as a KeyValue field `number`, each distinct one encoded once (`memo`)."""
    if not attributes:
        return b""
    out = []
    for key, value in attributes.items():
        # The type is part of the key: True == 1 == 1.0, but each is written differently.
        remembered: tuple[Any, ...] | None = (number, key, value.__class__, value)
        try:
            encoded = memo.get(remembered)
        except TypeError:  # an unhashable value (the SDK stores tuples, but a caller may not)
            remembered, encoded = None, None
        if encoded is None:
            encoded = _field(number, _field(1, key.encode()) + _field(2, _value(value)))
            if remembered is not None:
                if len(memo) >= MEMO_SIZE:
                    memo.clear()
                memo[remembered] = encoded
        out.append(encoded)
    return b"".join(out)


def _count(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value) if value else b""


def _span(span: ReadableSpan, memo: dict[Any, bytes]) -> bytes:
    context = span.get_span_context()
    assert context is not None  # an SDK span always has one
    parent = span.parent
    parts = [
        b"\x0a\x10" + context.trace_id.to_bytes(16, "big"),
        b"\x12\x08" + context.span_id.to_bytes(8, "big"),
    ]
    if context.trace_state:
        parts.append(_text(3, ",".join(f"{key}={value}" for key, value in context.trace_state.items())))
    if parent is not None:
        parts.append(b"\x22\x08" + parent.span_id.to_bytes(8, "big"))
    parts.append(_text(5, span.name))
    parts.append(b"\x30" + _varint(span.kind.value + 1))  # the SDK's kinds start at 0, OTLP's at 1
    parts.append(b"\x39" + _FIXED64(span.start_time or 0))
    parts.append(b"\x41" + _FIXED64(span.end_time or 0))
    parts.append(_attributes(9, span.attributes, memo))
    parts.append(_count(10, span.dropped_attributes))
    for event in span.events:
        body = b"\x09" + _FIXED64(event.timestamp) + _text(2, event.name)
        body += _attributes(3, event.attributes, memo) + _count(4, event.dropped_attributes)
        parts.append(_field(11, body))
    parts.append(_count(12, span.dropped_events))
    for link in span.links:
        body = (
            b"\x0a\x10"
            + link.context.trace_id.to_bytes(16, "big")
            + b"\x12\x08"
            + link.context.span_id.to_bytes(8, "big")
            + _attributes(4, link.attributes, memo)
            + _count(5, link.dropped_attributes)
            + b"\x35"
            + _FIXED32(_HAS_IS_REMOTE | (_IS_REMOTE if link.context.is_remote else 0))
        )
        parts.append(_field(13, body))
    parts.append(_count(14, span.dropped_links))
    status = span.status
    if status is not None:
        body = _text(2, status.description or "") + _count(3, status.status_code.value)
        parts.append(_field(15, body))
    remote = parent is not None and parent.is_remote
    parts.append(b"\x85\x01" + _FIXED32(_HAS_IS_REMOTE | (_IS_REMOTE if remote else 0)))
    return b"".join(parts)


def encode(spans: Sequence[ReadableSpan], memo: dict[Any, bytes] | None = None) -> bytes:
    """An ExportTraceServiceRequest: the spans grouped by resource, then by instrumentation scope
    (the gateway's spans share one of each: one group), in the order they came. `memo`: the
    KeyValues encoded so far, kept from one call to the next by the caller."""
    memo = {} if memo is None else memo
    groups: dict[int, tuple[Any, dict[int, tuple[Any, list[bytes]]]]] = {}
    for span in spans:
        resource = span.resource
        scope = span.instrumentation_scope
        _, scopes = groups.setdefault(id(resource), (resource, {}))
        scopes.setdefault(id(scope), (scope, []))[1].append(_field(2, _span(span, memo)))
    out = []
    for resource, scopes in groups.values():
        body = _field(1, _attributes(1, resource.attributes, memo))
        for scope, encoded in scopes.values():
            head, schema = _field(1, b""), b""
            if scope is not None:
                named = _text(1, scope.name) + _text(2, scope.version or "")
                head = _field(1, named + _attributes(3, scope.attributes, memo))
                schema = _text(3, scope.schema_url or "")
            body += _field(2, head + b"".join(encoded) + schema)
        body += _text(3, resource.schema_url)
        out.append(_field(1, body))
    return b"".join(out)


class Exporter(EncodedSpanExporter):
    """The SDK's OTLP/HTTP exporter (endpoint, headers, TLS, compression, retries: all its own),
    sending `encode`'s bytes in place of its encoder's. Used by the export thread alone."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(endpoint=endpoint)
        self._memo: dict[Any, bytes] = {}

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.send_encoded(encode(spans, self._memo))
