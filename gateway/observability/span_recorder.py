"""Spans recorded as plain values, handed to the span processor whole when they end.

The SDK's own span (`sdk.trace._Span`) guards every call with a lock, cleans and bounds each
attribute, event and link as it is added, and on `start_span` walks the context, the sampler and
the span processors' `on_start`: generic care that a request's spans, built by this package
alone, with fixed attribute sets, a handful of events and no links, never need. `Recorded`
implements the API's `Span` over a dict and a list, and at `end` builds the SDK's `ReadableSpan`
(the very object the SDK's span hands its processors) and gives it to the BatchSpanProcessor,
which queues it for the export thread as it would any span. The sampling decision was taken
before (trace_sampling.py): a `Recorded` span is always sampled.

Imported only when tracing is on (it imports the SDK).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import Attributes, AttributeValue

from gateway.observability.trace_sampling import IdGenerator

_UNSET = Status(StatusCode.UNSET)
# What a new trace's and a continued one's spans carry: sampled, and (W3C level 2) a random id
# where the trace's id is the SDK generator's.
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_SAMPLED_RANDOM = TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID)


class Recorder:
    """Where one app's spans go: its span processor, with its resource and scope."""

    __slots__ = ("ids", "processor", "resource", "scope")

    def __init__(self, processor: SpanProcessor, resource: Resource, scope: InstrumentationScope) -> None:
        self.processor = processor
        self.resource = resource
        self.scope = scope
        self.ids = IdGenerator()

    def root(
        self, name: str, trace_id: int, parent: SpanContext | None, kind: SpanKind = SpanKind.SERVER
    ) -> Recorded:
        """A request's first span: in the trace `parent` names (its flags and state kept), or in a
        new one, `trace_id`."""
        if parent is None:
            context = SpanContext(trace_id, self.ids.generate_span_id(), False, _SAMPLED_RANDOM)
        else:
            flags = _SAMPLED_RANDOM if parent.trace_flags.random_trace_id else _SAMPLED
            context = SpanContext(trace_id, self.ids.generate_span_id(), False, flags, parent.trace_state)
        return Recorded(self, name, context, parent, kind)

    def child(
        self,
        parent: Recorded,
        name: str,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: dict[str, Any] | None = None,
    ) -> Recorded:
        own = parent.context
        context = SpanContext(
            own.trace_id, self.ids.generate_span_id(), False, own.trace_flags, own.trace_state
        )
        return Recorded(self, name, context, own, kind, attributes)

    def client(self, parent: Recorded, name: str, attributes: dict[str, Any]) -> Recorded:
        return self.child(parent, name, SpanKind.CLIENT, attributes)


class Recorded(Span):
    """One span, recording until `end`. Not thread-safe: a request's spans live on its task."""

    __slots__ = (
        "_attributes",
        "_end",
        "_events",
        "_name",
        "_recorder",
        "_start",
        "_status",
        "context",
        "kind",
        "parent",
    )

    def __init__(
        self,
        recorder: Recorder,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: dict[str, Any] | None = None,
    ) -> None:
        self._recorder = recorder
        self._name = name
        self.context = context
        self.parent = parent
        self.kind = kind
        self._attributes: dict[str, Any] = attributes if attributes is not None else {}
        self._events: list[Event] = []
        self._status = _UNSET
        self._start = time.time_ns()
        self._end: int | None = None

    def get_span_context(self) -> SpanContext:
        return self.context

    def is_recording(self) -> bool:
        return self._end is None

    # After `end` a span is the export thread's (its ReadableSpan holds this dict and list): as the
    # SDK's span does, it ignores changes from then on.
    def set_attribute(self, key: str, value: AttributeValue) -> None:
        if self._end is None:
            self._attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        if self._end is None:
            self._attributes.update(attributes)

    def add_event(self, name: str, attributes: Attributes = None, timestamp: int | None = None) -> None:
        if self._end is None:
            self._events.append(Event(name, attributes, time.time_ns() if timestamp is None else timestamp))

    def add_link(self, context: SpanContext, attributes: Attributes = None) -> None:
        raise NotImplementedError("the gateway's spans carry no links")

    def update_name(self, name: str) -> None:
        self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self._end is None:
            self._status = status if isinstance(status, Status) else Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        raise NotImplementedError("the gateway records an error.type, never an exception's text")

    def end(self, end_time: int | None = None) -> None:
        if self._end is not None:
            return
        self._end = time.time_ns() if end_time is None else end_time
        recorder = self._recorder
        links: Sequence[Link] = ()
        recorder.processor.on_end(
            ReadableSpan(
                name=self._name,
                context=self.context,
                parent=self.parent,
                resource=recorder.resource,
                attributes=self._attributes,
                events=self._events,
                links=links,
                kind=self.kind,
                status=self._status,
                start_time=self._start,
                end_time=self._end,
                instrumentation_scope=recorder.scope,
            )
        )
