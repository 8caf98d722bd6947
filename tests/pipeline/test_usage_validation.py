"""A worker whose usage report lies (a token count of 2^63 - 1, negative, a string, a float) in an
otherwise valid answer: the client still gets the answer as the worker gave it, but the gateway
bills its own estimate instead, flags the request as an error, counts
`sluicegate_upstream_errors_total{reason="invalid_usage"}`, and settles the request normally, so
the key's next request is admitted and metered."""

from __future__ import annotations

import pytest

from tests.conftest import GatewayFactory
from tests.http import post, sse_data
from tests.pipeline.hostile import CONTENT, MODEL, USAGE_LIES, HostileWorker
from tests.pipeline.support import (
    CHAT,
    chat,
    hostile_headers,
    hostile_table,
    metric_sum,
    wait_inflight_zero,
    wait_requests_metered,
)

SMALL = 10**6  # far above the gateway's estimate for this prompt and answer, far below any lie


def _mode(lie: str, stream: bool) -> str:
    return f"{'stream-' if stream else ''}usage-{lie}"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("lie", sorted(USAGE_LIES))
def test_a_lying_usage_report_still_answers_the_client(
    make_gateway: GatewayFactory, hostile: HostileWorker, lie: str, stream: bool
) -> None:
    with make_gateway(hostile_table((hostile.url,))) as gw:
        key = gw.new_key()
        mode = _mode(lie, stream)
        reply = post(
            f"{gw.url}{CHAT}", chat(MODEL, stream=stream), key=key["key"], headers=hostile_headers(mode)
        )
        assert reply.status == 200, (
            f"a valid answer whose usage report lies ({lie}) reached the client as {reply.status}: "
            f"{reply.body[:300]!r}"
        )
        if stream:
            events = sse_data(reply.body)
            assert events, "the stream carried no events"
            assert events[-1] == b"[DONE]", f"the stream did not end with [DONE]: {events[-3:]}"
            errors = [e for e in events if e.startswith(b'{"error"')]
            assert not errors, f"the client got an error event for the worker's usage report: {errors}"
            text = b"".join(events)
            for token in CONTENT:
                assert token.encode() in text, f"the answer's text {token!r} did not reach the client"
        else:
            answer = reply.json()
            assert answer["choices"][0]["message"]["content"] == "".join(CONTENT)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("lie", sorted(USAGE_LIES))
def test_a_lying_usage_report_is_not_billed_and_settles(
    make_gateway: GatewayFactory, hostile: HostileWorker, lie: str, stream: bool
) -> None:
    with make_gateway(hostile_table((hostile.url,))) as gw:
        key = gw.new_key(max_concurrency=1)
        mode = _mode(lie, stream)
        post(f"{gw.url}{CHAT}", chat(MODEL, stream=stream), key=key["key"], headers=hostile_headers(mode))
        follow_up = post(
            f"{gw.url}{CHAT}", chat(MODEL, stream=stream), key=key["key"], headers=hostile_headers("ok")
        )
        assert follow_up.status == 200, (
            f"after a usage report that lies ({lie}), the key's next request got {follow_up.status}: the "
            f"lying request was never settled ({follow_up.body[:200]!r})"
        )
        totals = wait_requests_metered(gw, key["team"], 2)
        assert totals["errors"] == 1, (
            f"usage counts {totals['errors']} errors: the lying usage report ({lie}) was not flagged"
        )
        for field in ("prompt_tokens", "completion_tokens"):
            assert 0 <= totals[field] < SMALL, (
                f"the team is billed {totals[field]} {field} for two tiny answers: the worker's lie ({lie}) "
                "was billed"
            )
        wait_inflight_zero(gw, MODEL)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("lie", sorted(USAGE_LIES))
def test_a_lying_usage_report_is_counted_as_invalid_usage(
    make_gateway: GatewayFactory, hostile: HostileWorker, lie: str, stream: bool
) -> None:
    with make_gateway(hostile_table((hostile.url,))) as gw:
        key = gw.new_key()
        mode = _mode(lie, stream)
        post(f"{gw.url}{CHAT}", chat(MODEL, stream=stream), key=key["key"], headers=hostile_headers(mode))
        wait_requests_metered(gw, key["team"], 1)
        invalid = metric_sum(gw, "sluicegate_upstream_errors_total", model=MODEL, reason="invalid_usage")
        assert invalid == 1, (
            f'sluicegate_upstream_errors_total{{model="{MODEL}",reason="invalid_usage"}} is {invalid}: an '
            "operator cannot see that this worker reports bogus usage"
        )
