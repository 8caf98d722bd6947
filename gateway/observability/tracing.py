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
import time
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from gateway.errors import Failure, GatewayError
from gateway.observability.tracing_config import TracingConfig

__all__ = ["RequestTrace", "Tracing", "TracingConfig", "failed", "head", "phase", "settling"]

if TYPE_CHECKING:
    from types import TracebackType

    from opentelemetry.trace import Span
    from starlette.types import Scope

    from gateway.observability.span_recorder import Recorded


class TracedRequest(Protocol):
    """What a span reads of the request record (gateway.http.context.RequestContext). Written as
    a protocol so that this module imports neither the record nor the settlement: the record
    names `RequestTrace`, and nothing here points back at it."""

    @property
    def request_id(self) -> str: ...
    @property
    def api(self) -> str: ...
    @property
    def team(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def served_by_model(self) -> str: ...
    @property
    def served_by(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...
    @property
    def finish_reason(self) -> str: ...
    @property
    def refused_by(self) -> tuple[str, str] | None: ...


class TracedAnswer(Protocol):
    """What the attempt that answered reads of the settlement's outcome (gateway.proxy.settlement)."""

    @property
    def first_token_at(self) -> float | None: ...
    @property
    def error_reason(self) -> Failure | None: ...


# A context manager that does nothing, for requests that are not traced: shared, it holds no state.
_NO_PHASE: contextlib.nullcontext[None] = contextlib.nullcontext()


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


class _Phase:
    """A child span that ends with its block; an error leaving the block marks it failed."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def __enter__(self) -> Span:
        return self.span

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if error is not None:
            failed(self.span, _error_type(error))
        self.span.end()


class _Mark:
    """A phase recorded as an event on the SERVER span at the block's end (its start is known
    from the span before it), with `error.type` when an error left the block."""

    __slots__ = ("name", "span")

    def __init__(self, span: Span, name: str) -> None:
        self.span = span
        self.name = name

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.span.add_event(self.name, None if error is None else {"error.type": _error_type(error)})


def _error_type(error: BaseException) -> str:
    return error.code.wire_code if isinstance(error, GatewayError) else type(error).__name__


def failed(span: Span, error_type: str) -> None:
    """Marks a span failed with a low-cardinality reason (error.type), never a message: a message
    can quote what a client sent."""
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR))


def head(attempt: Span, status: int) -> None:
    """A worker attempt's response head arrived: its time to first byte."""
    if not attempt.is_recording():
        return
    attempt.add_event("first_byte")
    if status >= 500 or 300 <= status < 400:
        from opentelemetry.trace import Status, StatusCode

        attempt.set_attributes({"http.response.status_code": status, "error.type": str(status)})
        attempt.set_status(Status(StatusCode.ERROR))
    else:
        attempt.set_attribute("http.response.status_code", status)


# The phases recorded as events on the SERVER span, not as spans of their own (module docstring).
_MARKS = frozenset({"authenticate", "settle"})
_MAX_ADDRESSES = 1024  # worker URLs remembered; past it (endpoints churning), split each time


class RequestTrace:
    """The spans of one request, made by the middleware when tracing is on (`ctx.trace`). When the
    sampler dropped the request (`server` None: `recording` false), it builds no span and sets
    nothing; the worker still gets a traceparent, the one the decision made."""

    __slots__ = (
        "_answering",
        "_attempts",
        "_client",
        "_ctx",
        "_dropped",
        "_recorded",
        "_server",
        "_tracing",
        "recording",
    )

    def __init__(
        self,
        tracing: Tracing,
        server: Recorded | None,
        ctx: TracedRequest,
        client_address: str = "",
        traceparent: str = "",
        tracestate: str = "",
    ) -> None:
        self._tracing = tracing
        self._ctx = ctx
        self._client = client_address
        self._answering: Span | None = None
        self._attempts = 0
        self.recording = server is not None
        if server is None:
            # A dropped request's attempts are this no-op span; its worker headers, these.
            self._server: Span = tracing.no_span
            self._dropped = {"traceparent": traceparent}
            if tracestate:
                self._dropped["tracestate"] = tracestate
            return
        self._server = self._recorded = server
        self._dropped = {}

    def phase(self, name: str) -> contextlib.AbstractContextManager[Span | None]:
        if not self.recording:
            return _NO_PHASE
        if name in _MARKS:
            return _Mark(self._server, name)
        return _Phase(self._tracing.recorder.child(self._recorded, name))

    def attempt(self, wire_model: str, pool: str, url: str) -> Span:
        """One try at one worker endpoint (the CLIENT span the worker's traceparent names); a no-op
        span when the request is not recorded."""
        self._attempts += 1
        if not self.recording:
            return self._server
        tracing = self._tracing
        operation = tracing.operations.get(self._ctx.api, self._ctx.api)
        address = tracing.addresses.get(url)
        if address is None:  # once per endpoint: the configured and discovered ones are few
            parts = urllib.parse.urlsplit(url)
            address = (parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
            if len(tracing.addresses) < _MAX_ADDRESSES:
                tracing.addresses[url] = address
        attributes: dict[str, str | int] = {
            "gen_ai.operation.name": operation,
            "gen_ai.request.model": wire_model,
            "server.address": address[0],
            "server.port": address[1],
            "sluicegate.pool": pool,
            "sluicegate.attempt": self._attempts,
        }
        return tracing.recorder.client(self._recorded, f"{operation} {wire_model}", attributes)

    def worker_headers(self, headers: Mapping[str, str], attempt: Span) -> dict[str, str]:
        """The worker's headers with a traceparent (and the trace's tracestate) naming `attempt`
        as the parent, in place of the client's own."""
        out = {name: value for name, value in headers.items() if name not in ("traceparent", "tracestate")}
        if not self.recording:
            out.update(self._dropped)
            return out
        span = attempt.get_span_context()
        out["traceparent"] = f"00-{span.trace_id:032x}-{span.span_id:016x}-{span.trace_flags:02x}"
        if span.trace_state:
            out["tracestate"] = span.trace_state.to_header()
        return out

    def answering(self, attempt: Span) -> None:
        """The attempt that answered lasts as long as its answer: it ends at `answered`."""
        self._answering = attempt

    def answered(self, outcome: TracedAnswer) -> None:
        span, self._answering = self._answering, None
        if span is None or not self.recording:
            return
        if outcome.first_token_at is not None:
            span.add_event("first_token", timestamp=_epoch_ns(outcome.first_token_at))
        # A bad answer (broken off, timed out, invalid); a bad status was marked at its head.
        if outcome.error_reason is not None and outcome.error_reason is not Failure.STATUS:
            failed(span, outcome.error_reason)
        span.end()

    def finish(self, scope: Scope, status: int) -> None:
        """Ends the SERVER span with everything the request learned about itself (ctx), set in
        one call."""
        if not self.recording:
            return  # a non-recording span's end does nothing
        from opentelemetry.trace import Status, StatusCode

        ctx, span = self._ctx, self._server
        attributes: dict[str, Any] = {
            "http.request.method": scope["method"],
            "url.path": scope["path"],
            "url.scheme": str(scope.get("scheme", "http")),
            "sluicegate.request_id": ctx.request_id,
            "http.response.status_code": status,
            "sluicegate.outcome": ctx.outcome or ("ok" if status < 400 else "refused"),
        }
        if self._client:
            attributes["client.address"] = self._client
        route = _route(scope)
        if route is not None:
            span.update_name(f"{scope['method']} {route}")
            attributes["http.route"] = route
        if ctx.api:
            attributes["sluicegate.api"] = ctx.api
            operation = self._tracing.operations.get(ctx.api)
            if operation is not None:
                attributes["gen_ai.operation.name"] = operation
        if ctx.team:
            attributes["sluicegate.team"] = ctx.team
        if ctx.model:
            attributes["gen_ai.request.model"] = ctx.model
        if ctx.served_by_model:
            attributes["gen_ai.response.model"] = ctx.served_by_model
        if ctx.served_by:
            attributes["sluicegate.served_by"] = ctx.served_by
        if ctx.outcome:  # settled: the counts are the metered ones
            attributes["gen_ai.usage.input_tokens"] = ctx.prompt_tokens
            attributes["gen_ai.usage.output_tokens"] = ctx.completion_tokens
        if ctx.finish_reason:
            attributes["gen_ai.response.finish_reasons"] = (ctx.finish_reason,)
        if ctx.refused_by is not None:
            attributes["sluicegate.limit"], attributes["sluicegate.limit.scope"] = ctx.refused_by
        if status >= 500:  # a 4xx is the client's doing, not a failed server span (HTTP semconv)
            attributes["error.type"] = str(status)
            span.set_status(Status(StatusCode.ERROR))
        span.set_attributes(attributes)
        span.end()


def phase(trace: RequestTrace | None, name: str) -> contextlib.AbstractContextManager[Span | None]:
    """`with phase(ctx.trace, "admit") as span:` -- a child span, or nothing when not traced."""
    return _NO_PHASE if trace is None else trace.phase(name)


def settling(
    trace: RequestTrace | None, outcome: TracedAnswer
) -> contextlib.AbstractContextManager[Span | None]:
    """Ends the worker call that answered, then marks the settlement's end (an event)."""
    if trace is None:
        return _NO_PHASE
    trace.answered(outcome)
    return trace.phase("settle")


def _route(scope: Scope) -> str | None:
    """The matched route's template (`/v1/models/{model}`), never a path with a client's ids in
    it; None when no route matched (a 404 is named by its method alone)."""
    if "endpoint" not in scope:
        return None
    path: str = scope["path"]
    params: Mapping[str, Any] = scope.get("path_params") or {}
    for name, value in params.items():
        at = path.rfind(str(value))
        if at >= 0:
            path = f"{path[:at]}{{{name}}}{path[at + len(str(value)) :]}"
    return path


def _epoch_ns(perf: float) -> int:
    """A perf_counter instant as the epoch nanoseconds a span event carries."""
    return time.time_ns() - int((time.perf_counter() - perf) * 1e9)
