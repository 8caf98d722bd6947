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
`ctx.trace is None`. On, the SDK's objects belong to one app: built in its lifespan (`Tracing`),
never installed as the process-global tracer provider, and shut down (flushed) when the lifespan
ends. Spans are handed to a BatchSpanProcessor, whose own thread exports them: a request never
waits on the collector. A request the sampler drops still gets a RequestTrace, which builds no
child span and sets no attribute: the worker's `traceparent` names the gateway's (unrecorded)
span, flagged not sampled, so the services behind the gateway keep the decision.

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

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer
    from starlette.types import Scope


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
    """One app's tracer provider and exporter: built by its lifespan, shut down when it ends."""

    def __init__(
        self, config: TracingConfig, *, version: str = "", operations: Mapping[str, str] | None = None
    ) -> None:
        """`operations`: the GenAI operation (gen_ai.operation.name) of each `ctx.api`, declared
        by each client API (gateway.apis) and handed down by the app."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        created = Resource.create({"service.name": config.service_name, "service.version": version})
        resource = _resource_type(Resource)(created.attributes, created.schema_url)
        self.provider: TracerProvider = TracerProvider(resource=resource, sampler=_sampler(config))
        self.provider.add_span_processor(
            BatchSpanProcessor(
                OTLPSpanExporter(endpoint=config.endpoint),
                max_queue_size=config.max_queue_size,
                schedule_delay_millis=config.schedule_delay_ms,
                max_export_batch_size=config.max_export_batch_size,
                export_timeout_millis=config.export_timeout_ms,
            )
        )
        self.tracer: Tracer = self.provider.get_tracer("sluicegate", version)
        self.propagator = TraceContextTextMapPropagator()
        self.operations: Mapping[str, str] = dict(operations or {})

    def start(self, scope: Scope, ctx: TracedRequest, client_address: str) -> RequestTrace:
        """The SERVER span of one request, continuing the trace its traceparent names, if any."""
        from opentelemetry.trace import SpanKind

        carrier: dict[str, str] = {}
        for name, value in scope["headers"]:
            if name in (b"traceparent", b"tracestate"):
                carrier[name.decode()] = value.decode("latin-1")
        parent = self.propagator.extract(carrier) if carrier else None
        # No attributes yet: the built-in samplers read none, and `finish` sets them all at once.
        span = self.tracer.start_span(scope["method"], context=parent, kind=SpanKind.SERVER)
        return RequestTrace(self, span, ctx, client_address)

    def shutdown(self) -> None:
        """Blocks until the spans still queued are exported (or the export timeout passes)."""
        self.provider.shutdown()


def _resource_type(base: Any) -> Any:
    """The SDK's Resource, hashing once: the OTLP encoder groups every exported span by its
    resource in a dict, and Resource.__hash__ serialises its attributes to JSON on each call
    (a tenth of the cost of exporting a span, measured). Its attributes are immutable."""

    class _Resource(base):  # type: ignore[misc]
        def __hash__(self) -> int:
            cached: int | None = self.__dict__.get("_hash")
            if cached is None:
                cached = self.__dict__["_hash"] = super().__hash__()
            return cached

        def __eq__(self, other: object) -> bool:
            return self is other or bool(super().__eq__(other))

    return _Resource


def _sampler(config: TracingConfig) -> Any:
    from opentelemetry.sdk.trace import sampling

    base = config.sampler.removeprefix("parentbased_")
    root = {
        "always_on": sampling.ALWAYS_ON,
        "always_off": sampling.ALWAYS_OFF,
        "traceidratio": sampling.TraceIdRatioBased(config.sampler_arg),
    }[base]
    return sampling.ParentBased(root) if config.sampler.startswith("parentbased_") else root


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


class RequestTrace:
    """The spans of one request, made by the middleware when tracing is on (`ctx.trace`). When the
    sampler dropped the request (`recording` false), it builds no child span and sets nothing:
    the SERVER span, then, is a non-recording one that only carries the trace's ids."""

    __slots__ = ("_answering", "_attempts", "_client", "_ctx", "_parent", "_server", "_tracing", "recording")

    def __init__(self, tracing: Tracing, server: Span, ctx: TracedRequest, client_address: str = "") -> None:
        from opentelemetry.trace import set_span_in_context

        self._tracing = tracing
        self._server = server
        self._ctx = ctx
        self._client = client_address
        self.recording = server.is_recording()
        self._parent = set_span_in_context(server)
        self._answering: Span | None = None
        self._attempts = 0

    def phase(self, name: str) -> contextlib.AbstractContextManager[Span | None]:
        if not self.recording:
            return _NO_PHASE
        if name in _MARKS:
            return _Mark(self._server, name)
        return _Phase(self._tracing.tracer.start_span(name, context=self._parent))

    def attempt(self, wire_model: str, pool: str, url: str) -> Span:
        """One try at one worker endpoint (the CLIENT span the worker's traceparent names). Not
        recording, the SERVER span stands in: its ids are what the worker is told."""
        from opentelemetry.trace import SpanKind

        self._attempts += 1
        if not self.recording:
            return self._server
        operation = self._tracing.operations.get(self._ctx.api, self._ctx.api)
        parts = urllib.parse.urlsplit(url)
        attributes: dict[str, str | int] = {
            "gen_ai.operation.name": operation,
            "gen_ai.request.model": wire_model,
            "server.address": parts.hostname or "",
            "server.port": parts.port or (443 if parts.scheme == "https" else 80),
            "sluicegate.pool": pool,
            "sluicegate.attempt": self._attempts,
        }
        return self._tracing.tracer.start_span(
            f"{operation} {wire_model}", context=self._parent, kind=SpanKind.CLIENT, attributes=attributes
        )

    def worker_headers(self, headers: Mapping[str, str], attempt: Span) -> dict[str, str]:
        """The worker's headers with a traceparent (and the trace's tracestate) naming `attempt`
        as the parent, in place of the client's own."""
        from opentelemetry.trace import set_span_in_context

        out = {name: value for name, value in headers.items() if name not in ("traceparent", "tracestate")}
        self._tracing.propagator.inject(out, context=set_span_in_context(attempt))
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
