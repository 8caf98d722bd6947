"""One traced request's spans (`RequestTrace`, gateway/observability/tracing.py tells the whole
design): its SERVER span, the phases under it (child spans, or events for `authenticate` and
`settle`), one CLIENT span per worker attempt and the traceparent each attempt hands its worker.
"""

from __future__ import annotations

import contextlib
import time
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from gateway.errors import Failure, GatewayError

if TYPE_CHECKING:
    from types import TracebackType

    from opentelemetry.trace import Span
    from starlette.types import Scope

    from gateway.observability.span_recorder import Recorded
    from gateway.observability.tracing import Tracing

# A context manager that does nothing, for requests that are not traced: shared, it holds no state.
NO_PHASE: contextlib.nullcontext[None] = contextlib.nullcontext()


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
            return NO_PHASE
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
