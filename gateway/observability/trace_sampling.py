"""The sampler's decision for one request, taken before any span exists.

The SDK decides only inside `start_span`, after it has built a span context, looked the parent up
in a context object and, for a dropped request, a non-recording span; the worker's `traceparent`
then takes a propagator and two more contexts. For the requests a ratio sampler drops (most of
them, by design) that was nearly all of tracing's cost. Every built-in sampler the gateway
accepts (tracing_config.SAMPLERS) decides from two things only, the parent's sampled flag and the
trace id, so `Decider` takes the same decision up front, with the SDK's own bound
(TraceIdRatioBased.get_bound_for_rate) and the SDK's id generator:

- dropped: no span is built; the worker gets `traceparent` `00-{trace}-{new span id}-{flags}`,
  not sampled, exactly as the SDK's non-recording span would have been injected (a new trace's
  flags carry W3C level 2's random-trace-id bit, a continued one keeps its parent's);
- sampled: the SDK builds the span as always, with its own sampler, which takes the same decision
  again; a new trace's id is the one decided on, handed to the SDK by `_IdGenerator`.

Imported only when tracing is on (it imports the SDK).
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.trace import SpanContext, TraceFlags

_LOW_64 = TraceIdRatioBased.TRACE_ID_LIMIT


class IdGenerator(RandomIdGenerator):
    """The SDK's random ids, except that the next trace id can be given: `start_span` asks for a
    new trace's id synchronously, on the thread that called it, so a value put here just before
    the call is the one it takes (and is used once)."""

    def __init__(self) -> None:
        self.next_trace_id = 0

    def generate_trace_id(self) -> int:
        trace_id, self.next_trace_id = self.next_trace_id, 0
        return trace_id or super().generate_trace_id()


@dataclass(frozen=True, slots=True)
class Decision:
    sampled: bool
    trace_id: int
    # For a dropped request: the worker's traceparent and tracestate ("" for none).
    traceparent: str = ""
    tracestate: str = ""


class Decider:
    """The decision of one of the SDK's built-in samplers, named as OTEL_TRACES_SAMPLER names it."""

    __slots__ = ("_bound", "_ids", "_parent_based")

    def __init__(self, sampler: str, ratio: float, ids: IdGenerator) -> None:
        self._parent_based = sampler.startswith("parentbased_")
        root = sampler.removeprefix("parentbased_")
        if root == "always_on":
            self._bound = _LOW_64 + 1  # above every trace id's low 64 bits: always sampled
        elif root == "always_off":
            self._bound = 0
        else:
            self._bound = TraceIdRatioBased.get_bound_for_rate(ratio)
        self._ids = ids

    def decide(self, parent: SpanContext | None) -> Decision:
        """`parent`: the client's valid span context (from its traceparent), else None."""
        if parent is None:
            trace_id = self._ids.generate_trace_id()
            sampled = trace_id & _LOW_64 < self._bound
            flags = TraceFlags.RANDOM_TRACE_ID  # the SDK's ids are random
            state = ""
        else:
            trace_id = parent.trace_id
            sampled = parent.trace_flags.sampled if self._parent_based else trace_id & _LOW_64 < self._bound
            flags = parent.trace_flags & TraceFlags.RANDOM_TRACE_ID
            state = parent.trace_state.to_header() if parent.trace_state else ""
        if sampled:
            return Decision(True, trace_id)
        span_id = self._ids.generate_span_id()
        return Decision(False, trace_id, f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}", state)
