"""OpenTelemetry traces of API requests (routes under /v1/), exported over OTLP/HTTP.

One trace per sampled request: a SERVER span that continues the client's W3C
`traceparent`/`tracestate` (else starts a trace), with children `admit` (the limits' round trip,
which a refusal marks failed), `queue wait` (only when the pool was saturated and the request
waited) and one CLIENT span per worker attempt (`{operation} {model}`: the worker's own
`traceparent` names that span as its parent, so a retried request shows both attempts, each with
its endpoint). Authentication and settlement are events on the SERVER span (`authenticate`,
`settle`, each at its end, with `error.type` when it failed) rather than spans: the one starts
with the request and the other with the answer's end, so an event's time gives the phase's
duration, and a span costs the gateway several times what an event does (every span is built,
queued and encoded apart).

Configured at start (tracing_config.py): tracing is on when an OTLP endpoint is set, sampled by a
parent-based ratio sampler by default. Off, the SDK is never imported and a request only tests
`ctx.trace is None`. On, the objects belong to one app: built in its lifespan (`Tracing`), never
installed as a process-global tracer provider, and shut down (flushed) when the lifespan ends.
The sampler's decision is taken before anything is built (trace_sampling.py): a request it drops
gets a RequestTrace that records nothing, and its worker a `traceparent` flagged not sampled,
naming a span id of the gateway's, so the services behind the gateway keep the decision. A
sampled request's spans are recorded as plain values (span_recorder.py) and handed, as the SDK's
ReadableSpans, to a BatchSpanProcessor, whose own thread encodes (otlp_encoding.py) and exports
them: a request never waits on the collector. Together these took tracing from +114 % of a
request's instructions (every request sampled) to the numbers in docs/tracing-and-logs.md.

Attributes follow the OpenTelemetry GenAI and HTTP semantic conventions where they exist, and each
span's are set in one call (a span's attribute store takes a lock and checks every value on each
call). They never carry a key, a key id, a prompt or a completion: a span sees what the access
log sees, minus the key id (a trace backend is usually readable by more people than the logs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gateway.observability.request_trace import (
    NO_PHASE,
    RequestTrace,
    TracedAnswer,
    TracedRequest,
    failed,
    head,
)
from gateway.observability.tracing_config import TracingConfig

__all__ = [
    "RequestTrace",
    "TracedAnswer",
    "TracedRequest",
    "Tracing",
    "TracingConfig",
    "failed",
    "head",
    "phase",
    "settling",
]

if TYPE_CHECKING:
    from opentelemetry.trace import Span
    from starlette.types import Scope


class Tracing:
    """One app's span recorder, processor and exporter: built by its lifespan, shut down when it
    ends."""

    def __init__(
        self, config: TracingConfig, *, version: str = "", operations: Mapping[str, str] | None = None
    ) -> None:
        """`operations`: the GenAI operation (gen_ai.operation.name) of each `ctx.api`, declared
        by each client API (gateway.apis) and handed down by the app."""
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import INVALID_SPAN
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        from gateway.observability.otlp_encoding import Exporter
        from gateway.observability.span_recorder import Recorder
        from gateway.observability.trace_sampling import Decider

        self.processor = BatchSpanProcessor(
            Exporter(endpoint=config.endpoint),
            max_queue_size=config.max_queue_size,
            schedule_delay_millis=config.schedule_delay_ms,
            max_export_batch_size=config.max_export_batch_size,
            export_timeout_millis=config.export_timeout_ms,
        )
        resource = Resource.create({"service.name": config.service_name, "service.version": version})
        self.recorder = Recorder(self.processor, resource, InstrumentationScope("sluicegate", version))
        self._decider = Decider(config.sampler, config.sampler_arg, self.recorder.ids)
        self.propagator = TraceContextTextMapPropagator()  # reads a client's traceparent
        self.no_span: Span = INVALID_SPAN  # a dropped request's attempts: every call on it a no-op
        self.operations: Mapping[str, str] = dict(operations or {})
        # Each worker URL's server.address and server.port, split once (RequestTrace.attempt).
        self.addresses: dict[str, tuple[str, int]] = {}

    def start(self, scope: Scope, ctx: TracedRequest, client_address: str) -> RequestTrace:
        """The SERVER span of one request, continuing the trace its traceparent names, if any;
        none when the sampler drops it (trace_sampling.py)."""
        carrier: dict[str, str] = {}
        for name, value in scope["headers"]:
            if name in (b"traceparent", b"tracestate"):
                carrier[name.decode()] = value.decode("latin-1")
        parent, remote = None, None
        if carrier:
            from opentelemetry.trace import get_current_span

            parent = self.propagator.extract(carrier)
            remote = get_current_span(parent).get_span_context()
            if not remote.is_valid:
                remote = None
        decision = self._decider.decide(remote)
        if not decision.sampled:
            return RequestTrace(self, None, ctx, client_address, decision.traceparent, decision.tracestate)
        # No attributes yet: `finish` sets them all at once.
        span = self.recorder.root(scope["method"], decision.trace_id, remote)
        return RequestTrace(self, span, ctx, client_address)

    def shutdown(self) -> None:
        """Blocks until the spans still queued are exported (or the export timeout passes)."""
        self.processor.shutdown()  # type: ignore[no-untyped-call]


def phase(trace: RequestTrace | None, name: str) -> contextlib.AbstractContextManager[Span | None]:
    """`with phase(ctx.trace, "admit") as span:` -- a child span, or nothing when not traced."""
    return NO_PHASE if trace is None else trace.phase(name)


def settling(
    trace: RequestTrace | None, outcome: TracedAnswer
) -> contextlib.AbstractContextManager[Span | None]:
    """Ends the worker call that answered, then marks the settlement's end (an event)."""
    if trace is None:
        return NO_PHASE
    trace.answered(outcome)
    return trace.phase("settle")
