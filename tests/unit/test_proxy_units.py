"""The pure functions on a request's path: usage checks, reservations, the OpenAI dialect's stream
and headers, worker error translation, and what a settlement meters for each way a request ends."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from gateway.apis.openai.dialect import CHAT, COMPLETIONS, EMBEDDINGS, reset_duration
from gateway.errors import ErrorCode
from gateway.http.context import RequestContext, client_request_id, new_request_id
from gateway.limits import plans
from gateway.limits.admission import Admission, Limit, LimitKind, LimitState, Reservation
from gateway.limits.output import NO_OUTPUT, AskedOutput
from gateway.limits.spec import LimitSet, TokenCount
from gateway.metering.record import UsageRecord
from gateway.observability.metrics import Metrics
from gateway.proxy.settlement import Ending, Settlement
from gateway.proxy.usage import MAX_TOKENS, InvalidUsage, Usage, parse_usage
from gateway.proxy.worker_errors import MAX_MESSAGE_CHARS, worker_failure


@pytest.mark.parametrize(
    "report",
    [
        {"prompt_tokens": 2**63 - 1, "completion_tokens": 1},
        {"prompt_tokens": -1, "completion_tokens": 1},
        {"prompt_tokens": "12", "completion_tokens": 1},
        {"prompt_tokens": 1.5, "completion_tokens": 1},
        {"prompt_tokens": True, "completion_tokens": 1},
        {"prompt_tokens": 3, "completion_tokens": MAX_TOKENS + 1},
        {"completion_tokens": 3},
        [1, 2],
        None,
    ],
)
def test_unbelievable_usage_is_refused(report: Any) -> None:
    with pytest.raises(InvalidUsage):
        parse_usage(report)


def test_believable_usage_is_read() -> None:
    assert parse_usage({"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}) == Usage(3, 5)
    assert parse_usage({"prompt_tokens": 7, "total_tokens": 7}) == Usage(7, 0)  # embeddings
    assert parse_usage({"prompt_tokens": 0, "completion_tokens": None}) == Usage(0, 0)


def test_request_ids_are_the_gateways_own() -> None:
    assert new_request_id() != new_request_id()
    assert len(new_request_id()) == 32
    assert client_request_id("trace-1:a.b_c") == "trace-1:a.b_c"
    assert client_request_id("two words") is None
    assert client_request_id("x" * 129) is None
    assert client_request_id("a\nforged") is None


def _chat(body: dict[str, Any]) -> Any:
    return CHAT.parse(orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], **body}))


def test_the_output_asked_is_the_cap_given_and_every_answer_generated() -> None:
    assert _chat({"max_tokens": 50}).asked_output() == AskedOutput(50)
    assert _chat({"max_completion_tokens": 7, "max_tokens": 50}).asked_output() == AskedOutput(7)
    assert _chat({}).asked_output() == AskedOutput(None)
    assert _chat({"max_tokens": 5, "n": 3, "best_of": 4}).asked_output() == AskedOutput(5, 4)
    completion = COMPLETIONS.parse(b'{"model": "m", "prompt": "hi"}')
    assert completion.asked_output() == AskedOutput(16)  # the API's own default
    embed = EMBEDDINGS.parse(b'{"model": "m", "input": "hello there"}')
    assert embed.asked_output() == NO_OUTPUT
    assert Reservation(10, 20).tokens(TokenCount.INPUT) == 10
    assert Reservation(10, 20).tokens(TokenCount.OUTPUT) == 20
    assert Reservation(10, 20).tokens(TokenCount.TOTAL) == 30


def test_worker_body_asks_for_usage_on_every_chunk_and_renames_the_model() -> None:
    call = _chat({"stream": True, "stream_options": {"include_usage": False}})
    body = orjson.loads(
        call.worker_body("upstream/name", continuous_usage=True, max_tokens=9, cache_salt=None)
    )
    assert body["model"] == "upstream/name"
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["max_tokens"] == 9
    plain = orjson.loads(call.worker_body("m", continuous_usage=False, max_tokens=9, cache_salt=None))
    assert plain["stream_options"] == {"include_usage": True}
    whole = _chat({"max_tokens": 9})
    assert (
        whole.worker_body("m", continuous_usage=True, max_tokens=9, cache_salt=None) is whole.raw
    )  # nothing to change


def test_the_worker_gets_the_cap_in_the_field_the_client_used() -> None:
    def sent(body: dict[str, Any], cap: int | None) -> dict[str, Any]:
        parsed: dict[str, Any] = orjson.loads(
            _chat(body).worker_body("m", continuous_usage=False, max_tokens=cap, cache_salt=None)
        )
        return parsed

    assert sent({}, 1024)["max_tokens"] == 1024  # none asked: the default, explicitly
    newer = sent({"max_completion_tokens": 500}, 100)
    assert (newer["max_completion_tokens"], "max_tokens" in newer) == (100, False)
    both = sent({"max_completion_tokens": 500, "max_tokens": 600}, 100)
    assert (both["max_completion_tokens"], both["max_tokens"]) == (100, 100)
    embed = EMBEDDINGS.parse(b'{"model": "m", "input": "hello there"}')
    assert "max_tokens" not in orjson.loads(
        embed.worker_body("x", continuous_usage=False, max_tokens=None, cache_salt=None)
    )


def _chunk(content: str, usage: dict[str, int] | None = None, model: str = "up") -> dict[str, Any]:
    chunk: dict[str, Any] = {"model": model, "choices": [{"index": 0, "delta": {"content": content}}]}
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def _client_bytes(call: Any, chunk: dict[str, Any]) -> bytes:
    data = orjson.dumps(chunk)
    return CHAT.stream(call, "m").event(chunk, data, b"data: " + data + b"\n\n")


def test_stream_hides_the_gateways_usage_reports_from_a_client_that_did_not_ask() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    plain = _chat({"stream": True})
    out = orjson.loads(_client_bytes(plain, _chunk("a", usage)).removeprefix(b"data: "))
    assert "usage" not in out
    assert out["model"] == "m"
    assert _client_bytes(plain, {"model": "up", "choices": [], "usage": usage}) == b""
    asked = _chat({"stream": True, "stream_options": {"include_usage": True}})
    assert b'"usage"' in _client_bytes(asked, {"model": "up", "choices": [], "usage": usage})
    assert b'"usage"' not in _client_bytes(asked, _chunk("a", usage))
    continuous = _chat(
        {"stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    )
    assert b'"usage"' in _client_bytes(continuous, _chunk("a", usage))


def test_usage_is_stripped_wherever_the_worker_put_it() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    plain = _chat({"stream": True})
    first = {"usage": usage, **_chunk("a")}  # not last: the bytes cannot simply be cut
    out = orjson.loads(_client_bytes(plain, first).removeprefix(b"data: "))
    assert "usage" not in out
    assert out["choices"][0]["delta"]["content"] == "a"
    spaced = b'{"model": "up", "choices": [{"delta": {"content": "b"}}], "usage": {"prompt_tokens": 3}}'
    event = CHAT.stream(plain, "m").event(orjson.loads(spaced), spaced, b"data: " + spaced + b"\n\n")
    out = orjson.loads(event.removeprefix(b"data: "))
    assert out == {"model": "m", "choices": [{"delta": {"content": "b"}}]}


def test_model_rewrite_keeps_other_bytes() -> None:
    call = _chat({"stream": True})
    raw = b'{"model":"up","choices":[{"delta":{"content":"\\"model\\": \\"up\\""}}]}'
    out = CHAT.stream(call, "m").event(orjson.loads(raw), raw, b"data: " + raw + b"\n\n")
    assert out == b'data: {"model":"m","choices":[{"delta":{"content":"\\"model\\": \\"up\\""}}]}\n\n'


def _state(kind: LimitKind, amount: int, remaining: int, reset: float) -> LimitState:
    return LimitState(Limit(kind, f"k{amount}", amount, "d"), remaining, reset, 0.0)


def test_rate_limit_headers_name_the_tightest_limit_of_each_kind() -> None:
    states = (
        _state(LimitKind.REQUESTS, 100, 40, 0.5),
        _state(LimitKind.REQUESTS, 10, 3, 6.0),
        _state(LimitKind.TOKENS, 1000, 900, 61.0),
        _state(LimitKind.CONCURRENCY, 2, 1, 0.0),
    )
    headers = CHAT.limit_headers(Admission(True, states, None))
    assert headers == {
        "x-ratelimit-limit-requests": "10",
        "x-ratelimit-remaining-requests": "3",
        "x-ratelimit-reset-requests": "6s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "900",
        "x-ratelimit-reset-tokens": "1m1s",
    }
    assert reset_duration(0.02) == "20ms"


def test_limit_plan_covers_key_team_model_and_budgets() -> None:
    key = LimitSet(rpm=5, max_concurrency=1, per_model={"m": LimitSet(tpm=100, tpm_counts=TokenCount.OUTPUT)})
    team = LimitSet(tpm=1000, daily_tokens=10**6, monthly_tokens=10**7)
    now = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.UTC)
    planned = plans.plan("ml", team, "key_1", key, "m", now)
    kinds = [(limit.kind, limit.amount) for limit in planned]
    assert kinds == [
        (LimitKind.REQUESTS, 5),
        (LimitKind.CONCURRENCY, 1),
        (LimitKind.TOKENS, 100),
        (LimitKind.TOKENS, 1000),
        (LimitKind.BUDGET, 10**6),
        (LimitKind.BUDGET, 10**7),
    ]
    assert planned[2].counts is TokenCount.OUTPUT
    assert all("{t:ml}" in limit.redis_key for limit in planned)
    assert planned[4].period_s == 12 * 3600


def test_worker_errors_keep_the_status_and_lose_the_shape() -> None:
    teapot = worker_failure("m", 418, b'{"error": "teapot"}', {})
    assert (teapot.status, teapot.message, teapot.code) == (418, "teapot", ErrorCode.WORKER_REJECTED)
    int_code = worker_failure("m", 400, b'{"error": {"message": "bad\\nthing", "code": 400}}', {})
    assert int_code.envelope()["error"] == {
        "message": "bad thing",
        "type": "invalid_request_error",
        "param": None,
        "code": "worker_rejected",
    }
    html = worker_failure("m", 404, b"<html><body>nope</body></html>", {})
    assert html.status == 404
    assert "<html" not in html.message
    huge = worker_failure("m", 400, orjson.dumps({"error": {"message": "x" * 10**6}}), {})
    assert len(huge.message) <= MAX_MESSAGE_CHARS
    failed = worker_failure("m", 500, b"<html>oops</html>", {"retry-after": "3"})
    assert (failed.status, failed.code, failed.headers) == (
        502,
        ErrorCode.UPSTREAM_ERROR,
        {"retry-after": "3"},
    )
    assert worker_failure("m", 401, b"{}", {}).status == 502  # the gateway's credentials, not the client's
    assert worker_failure("m", 302, b"", {}).status == 502
    assert worker_failure("m", 504, b"", {}).code is ErrorCode.UPSTREAM_TIMEOUT


class _Meter:
    def __init__(self) -> None:
        self.records: list[UsageRecord] = []

    def submit(self, usage: UsageRecord) -> None:
        self.records.append(usage)


def _settlement() -> tuple[Settlement, _Meter, Metrics]:
    metrics, meter = Metrics(CollectorRegistry()), _Meter()
    ctx = RequestContext(request_id="r1", model="m", team="t", key_id="k")
    reservation = Reservation(10, 100)
    budget = LimitState(Limit(LimitKind.BUDGET, "b", 10**6, "d"), 0, 0.0, 0.0)
    granted = Admission(True, (budget,), None, request_id="r1", reservation=reservation)
    return Settlement(ctx, granted, 10, metrics, meter), meter, metrics


def _inflight(metrics: Metrics) -> float:
    value = metrics.registry.get_sample_value("sluicegate_inflight_requests", {"model": "m"})
    return value if value is not None else 0.0


@pytest.mark.parametrize(
    ("seen", "expected", "ending"),
    [
        ({"reached_worker": True, "usage": Usage(4, 6)}, (4, 6), Ending.OK),
        ({"failed": True}, (0, 0), Ending.ERROR),  # refused before any worker answered
        ({"reached_worker": True, "failed": True, "error_reason": "status_400"}, (0, 0), Ending.ERROR),
        ({"disconnected": True}, (10, 0), Ending.DISCONNECTED),  # left while queued
        (
            {"reached_worker": True, "disconnected": True, "relayed_usage": Usage(5, 3)},
            (5, 3),
            Ending.DISCONNECTED,
        ),
        ({"reached_worker": True, "disconnected": True, "tokens_relayed": 2}, (10, 2), Ending.DISCONNECTED),
        ({"reached_worker": True, "invalid_usage": True, "estimated_completion": 9}, (10, 9), Ending.ERROR),
        ({"reached_worker": True, "error_reason": "timeout", "tokens_relayed": 1}, (10, 1), Ending.ERROR),
    ],
)
def test_a_settlement_meters_once_what_the_request_used(
    seen: dict[str, Any], expected: tuple[int, int], ending: Ending
) -> None:
    settlement, meter, metrics = _settlement()
    assert _inflight(metrics) == 1
    for name, value in seen.items():
        setattr(settlement.outcome, name, value)
    settlement.finish()
    settlement.finish()  # a second call changes nothing
    assert len(meter.records) == 1
    record = meter.records[0]
    assert (record.prompt_tokens, record.completion_tokens) == expected
    assert (record.error, record.disconnected) == (ending is Ending.ERROR, ending is Ending.DISCONNECTED)
    assert record.settlements == (("b", "b", str(110 - sum(expected))),)  # the reservation given back
    assert _inflight(metrics) == 0


def test_a_large_refused_bodys_model_is_found_without_a_second_parse() -> None:
    """The access log's model of a refused body: a large one is searched, not parsed again (the
    8 MB bodies refused for their size cost more in that second parse than in all the rest)."""
    from gateway.proxy.parsing import _model_named

    quoted = [{"role": "user", "content": 'say "model": "not-this-one"'}] * 5_000
    assert _model_named(json.dumps({"messages": quoted, "model": "fake-model"}).encode()) == "fake-model"
    assert _model_named(json.dumps({"contents": quoted}).encode()) == ""
    assert _model_named(b'{"model": "small"}') == "small"
