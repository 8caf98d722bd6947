"""OpenTelemetry traces of API requests (routes under /v1/), exported over OTLP/HTTP.

One trace per request: a SERVER span that continues the client's W3C `traceparent`/`tracestate`
(else starts a trace), with children `authenticate`, `admit`, `queue wait` (only when the pool was
saturated and the request waited), one CLIENT span per worker attempt (`{operation} {model}`:
the worker's own `traceparent` names that span as its parent, so a retried request shows both
attempts, each with its endpoint) and `settle`.

Configured only by the standard OTEL_* variables, read once at start (`TracingConfig.from_env`,
from Settings.from_env): tracing is on when an OTLP endpoint is set. Off, the SDK is never
imported and a request only tests `ctx.trace is None`. On, the SDK's objects belong to one app:
built in its lifespan (`Tracing`), never installed as the process-global tracer provider, and
shut down (flushed) when the lifespan ends. Spans are handed to a BatchSpanProcessor, whose own
thread exports them: a request never waits on the collector.

Attributes follow the OpenTelemetry GenAI and HTTP semantic conventions where they exist. They
never carry a key, a key id, a prompt or a completion: a span sees what the access log sees, minus
the key id (a trace backend is usually readable by more people than the logs).
"""

from __future__ import annotations

import contextlib
import math
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gateway.errors import ConfigError, Failure, GatewayError

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


_SAMPLERS = frozenset(
    {
        "always_on",
        "always_off",
        "traceidratio",
        "parentbased_always_on",
        "parentbased_always_off",
        "parentbased_traceidratio",
    }
)
# A context manager that does nothing, for requests that are not traced: shared, it holds no state.
_NO_PHASE: contextlib.nullcontext[None] = contextlib.nullcontext()


@dataclass(frozen=True, slots=True)
class TracingConfig:
    """What the OTEL_* variables ask for. The exporter's own variables (OTEL_EXPORTER_OTLP_HEADERS,
    _CERTIFICATE, _COMPRESSION, _TIMEOUT and their _TRACES_ forms) are read by the SDK itself: the
    headers often hold a collector's credentials, which the gateway's settings never copy."""

    endpoint: str  # the full URL spans are POSTed to
    service_name: str = "sluicegate"
    sampler: str = "parentbased_always_on"
    sampler_arg: float = 1.0
    max_queue_size: int = 2048
    schedule_delay_ms: float = 5000.0
    max_export_batch_size: int = 512
    export_timeout_ms: float = 30000.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TracingConfig | None:
        """None (tracing off) unless an OTLP endpoint is set; a value the SDK would reject, or a
        protocol the gateway does not speak, stops the start naming the variable."""
        defaults = cls(endpoint="")
        if (env.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
            return None
        exporter = (env.get("OTEL_TRACES_EXPORTER") or "otlp").strip().lower()
        if exporter == "none":
            return None
        if exporter != "otlp":
            raise ConfigError(f"OTEL_TRACES_EXPORTER: only otlp (or none) is supported, got {exporter!r}")
        traces = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or "").strip()
        base = (env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "").strip()
        if not traces and not base:
            return None
        name = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" if traces else "OTEL_EXPORTER_OTLP_ENDPOINT"
        # As the spec says: the signal's own endpoint is used as is, the base gets /v1/traces.
        endpoint = traces or base.rstrip("/") + "/v1/traces"
        parts = urllib.parse.urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{name}: expected an http:// or https:// URL, got {endpoint!r}")
        for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
            protocol = (env.get(variable) or "").strip().lower()
            if protocol:
                break
        if protocol not in ("", "http/protobuf"):
            raise ConfigError(
                f"{variable}: the gateway exports OTLP over HTTP only (http/protobuf, usually port "
                f"4318; collectors serve it beside gRPC), got {protocol!r}"
            )
        sampler = (env.get("OTEL_TRACES_SAMPLER") or defaults.sampler).strip().lower()
        if sampler not in _SAMPLERS:
            raise ConfigError(f"OTEL_TRACES_SAMPLER: one of {', '.join(sorted(_SAMPLERS))}, got {sampler!r}")
        ratio = _number(env, "OTEL_TRACES_SAMPLER_ARG", defaults.sampler_arg, float)
        if "ratio" in sampler and not 0.0 <= ratio <= 1.0:
            raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG: a ratio from 0 to 1, got {ratio!r}")
        queue = _number(env, "OTEL_BSP_MAX_QUEUE_SIZE", defaults.max_queue_size, int)
        batch = _number(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", defaults.max_export_batch_size, int)
        if batch > queue:
            raise ConfigError(
                f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE: at most OTEL_BSP_MAX_QUEUE_SIZE ({queue}), got {batch}"
            )
        return cls(
            endpoint=endpoint,
            service_name=(env.get("OTEL_SERVICE_NAME") or "").strip() or defaults.service_name,
            sampler=sampler,
            sampler_arg=ratio,
            max_queue_size=queue,
            schedule_delay_ms=_number(env, "OTEL_BSP_SCHEDULE_DELAY", defaults.schedule_delay_ms, float),
            max_export_batch_size=batch,
            export_timeout_ms=_number(env, "OTEL_BSP_EXPORT_TIMEOUT", defaults.export_timeout_ms, float),
        )


def _number(env: Mapping[str, str], name: str, default: Any, cast: type[int] | type[float]) -> Any:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = cast(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected a number, got {raw!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and cast is int):
        raise ConfigError(f"{name}: out of range, got {raw!r}")
    return value


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

        resource = Resource.create({"service.name": config.service_name, "service.version": version})
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
        attributes: dict[str, str] = {
            "http.request.method": scope["method"],
            "url.path": scope["path"],
            "url.scheme": str(scope.get("scheme", "http")),
            "sluicegate.request_id": ctx.request_id,
        }
        if client_address:
            attributes["client.address"] = client_address
        span = self.tracer.start_span(
            scope["method"], context=parent, kind=SpanKind.SERVER, attributes=attributes
        )
        return RequestTrace(self, span, ctx)

    def shutdown(self) -> None:
        """Blocks until the spans still queued are exported (or the export timeout passes)."""
        self.provider.shutdown()


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
            code = error.code.wire_code if isinstance(error, GatewayError) else type(error).__name__
            failed(self.span, code)
        self.span.end()


def failed(span: Span, error_type: str) -> None:
    """Marks a span failed with a low-cardinality reason (error.type), never a message: a message
    can quote what a client sent."""
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR))


def head(attempt: Span, status: int) -> None:
    """A worker attempt's response head arrived: its time to first byte."""
    attempt.add_event("first_byte")
    attempt.set_attribute("http.response.status_code", status)
    if status >= 500 or 300 <= status < 400:
        failed(attempt, str(status))


class RequestTrace:
    """The spans of one request, made by the middleware when tracing is on (`ctx.trace`)."""

    __slots__ = ("_answering", "_attempts", "_ctx", "_parent", "_server", "_tracing")

    def __init__(self, tracing: Tracing, server: Span, ctx: TracedRequest) -> None:
        from opentelemetry.trace import set_span_in_context

        self._tracing = tracing
        self._server = server
        self._ctx = ctx
        self._parent = set_span_in_context(server)
        self._answering: Span | None = None
        self._attempts = 0

    def phase(self, name: str) -> _Phase:
        return _Phase(self._tracing.tracer.start_span(name, context=self._parent))

    def attempt(self, wire_model: str, pool: str, url: str) -> Span:
        """One try at one worker endpoint (the CLIENT span the worker's traceparent names)."""
        from opentelemetry.trace import SpanKind

        self._attempts += 1
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
        if span is None:
            return
        if outcome.first_token_at is not None:
            span.add_event("first_token", timestamp=_epoch_ns(outcome.first_token_at))
        # A bad answer (broken off, timed out, invalid); a bad status was marked at its head.
        if outcome.error_reason is not None and outcome.error_reason is not Failure.STATUS:
            failed(span, outcome.error_reason)
        span.end()

    def finish(self, scope: Scope, status: int) -> None:
        """Ends the SERVER span with what the request learned about itself (ctx)."""
        from opentelemetry.trace import Status, StatusCode

        ctx, span = self._ctx, self._server
        route = _route(scope)
        if route is not None:
            span.update_name(f"{scope['method']} {route}")
            span.set_attribute("http.route", route)
        attributes: dict[str, Any] = {
            "http.response.status_code": status,
            "sluicegate.outcome": ctx.outcome or ("ok" if status < 400 else "refused"),
        }
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
        span.set_attributes(attributes)
        if status >= 500:  # a 4xx is the client's doing, not a failed server span (HTTP semconv)
            span.set_attribute("error.type", str(status))
            span.set_status(Status(StatusCode.ERROR))
        span.end()


def phase(trace: RequestTrace | None, name: str) -> contextlib.AbstractContextManager[Span | None]:
    """`with phase(ctx.trace, "admit") as span:` -- a child span, or nothing when not traced."""
    return _NO_PHASE if trace is None else trace.phase(name)


def settling(
    trace: RequestTrace | None, outcome: TracedAnswer
) -> contextlib.AbstractContextManager[Span | None]:
    """Ends the worker call that answered, then spans the settlement."""
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
