"""The gateway's up-front sampling decision (gateway/observability/trace_sampling.py) is the one
the SDK's own sampler takes, for every built-in sampler, with and without a parent, on trace ids
on both sides of a ratio's bound: spans are built only for requests the SDK would record."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import sampling
from opentelemetry.sdk.trace.sampling import Sampler, TraceIdRatioBased
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState, set_span_in_context

from gateway.observability.trace_sampling import Decider, IdGenerator
from gateway.observability.tracing_config import SAMPLERS

RATIOS = (0.0, 0.05, 0.5, 1.0)


def _sdk_sampler(name: str, ratio: float) -> Sampler:
    """The SDK's sampler that OTEL_TRACES_SAMPLER=`name` (OTEL_TRACES_SAMPLER_ARG=`ratio`) makes."""
    root = {
        "always_on": sampling.ALWAYS_ON,
        "always_off": sampling.ALWAYS_OFF,
        "traceidratio": TraceIdRatioBased(ratio),
    }[name.removeprefix("parentbased_")]
    return sampling.ParentBased(root) if name.startswith("parentbased_") else root


def _trace_ids(ratio: float) -> list[int]:
    """Trace ids whose low 64 bits sit at, just below and just above the ratio's bound, and at the
    extremes, each with random-looking high bits."""
    bound = TraceIdRatioBased.get_bound_for_rate(ratio)
    lows = {0, 1, max(bound - 1, 0), bound, bound + 1, TraceIdRatioBased.TRACE_ID_LIMIT}
    return [
        0x5A5A_0000_0000_0000 << 64 | low for low in lows if low <= TraceIdRatioBased.TRACE_ID_LIMIT and low
    ]


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
@pytest.mark.parametrize("ratio", RATIOS)
def test_the_decision_is_the_sdk_samplers(sampler: str, ratio: float) -> None:
    sdk = _sdk_sampler(sampler, ratio)
    ids = IdGenerator()
    decider = Decider(sampler, ratio, ids)
    checked = 0
    for trace_id in _trace_ids(ratio):
        # A new trace: the decision is taken on the id the generator gives (here, this one).
        ids.next_trace_id = trace_id
        ours = decider.decide(None)
        assert ours.trace_id == trace_id
        expected = sdk.should_sample(None, trace_id, "POST").decision.is_sampled()  # type: ignore[no-untyped-call]
        assert ours.sampled is expected, (trace_id, "root")
        for flags in (TraceFlags.DEFAULT, TraceFlags.SAMPLED):
            parent = SpanContext(trace_id, 0x1234, is_remote=True, trace_flags=TraceFlags(flags))
            context = set_span_in_context(NonRecordingSpan(parent))
            expected = sdk.should_sample(context, trace_id, "POST").decision.is_sampled()  # type: ignore[no-untyped-call]
            assert decider.decide(parent).sampled is expected, (trace_id, flags)
            checked += 1
    assert checked >= 4  # at ratio 0 the bound is 0: two ids, each under two parents


def test_a_dropped_requests_traceparent_keeps_the_trace_and_its_state() -> None:
    ids = IdGenerator()
    decider = Decider("parentbased_traceidratio", 1.0, ids)
    state = TraceState([("vendor", "opaque")])
    parent = SpanContext(
        0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(TraceFlags.DEFAULT), trace_state=state
    )
    dropped = decider.decide(parent)
    assert not dropped.sampled
    version, trace_id, span_id, flags = dropped.traceparent.split("-")
    assert (version, int(trace_id, 16), flags) == ("00", 0xABC, "00")
    assert int(span_id, 16) not in (0, 0xDEF), "a span id of the gateway's own"
    assert dropped.tracestate == "vendor=opaque"
    # A new trace the ratio drops: not sampled, and its id marked random (W3C level 2), as the
    # SDK marks the ids it generates.
    fresh = Decider("parentbased_traceidratio", 0.0, ids).decide(None)
    assert not fresh.sampled
    assert fresh.traceparent.endswith("-02")
    assert int(fresh.traceparent.split("-")[1], 16) == fresh.trace_id != 0
