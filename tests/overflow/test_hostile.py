"""A hostile provider's answers that the fake worker would never give (the provider's `canned`
answer): what the client gets, and what the team is billed."""

from __future__ import annotations

import json
import threading
from typing import Any

import openai
import pytest

from tests.conftest import Gateway, GatewayFactory
from tests.http import post, sse_data
from tests.overflow.conftest import MODEL, allowed_team, busy_pool, chat, overflow_table, refused_at_deadline
from tests.overflow.provider import PROVIDER_MODEL, Provider
from tests.waiting import wait_until

_EVENT_STREAM = [(b"content-type", b"text/event-stream")]


def _chunk(**fields: Any) -> bytes:
    body = {"id": "c1", "object": "chat.completion.chunk", "model": PROVIDER_MODEL, **fields}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _delta(text: str) -> bytes:
    return _chunk(choices=[{"index": 0, "delta": {"content": text}, "finish_reason": None}])


def _overflow_row(gw: Gateway, team: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []

    def metered() -> bool:
        rows[:] = [r for r in gw.usage(team) if r["served_by"] == "overflow:cloud"]
        return bool(rows)

    wait_until(metered, 10, "the overflow request to be metered")
    (row,) = rows
    return row


def _stream(gw: Gateway, key: str) -> Any:
    return post(
        f"{gw.url}/v1/chat/completions",
        {"model": MODEL, "messages": [{"role": "user", "content": "a b c"}], "stream": True},
        key=key,
    )


def _overflowed_stream(gw: Gateway) -> tuple[str, Any]:
    """A new allowed team, and the reply to its streamed request sent while the pool is busy."""
    team = allowed_team(gw)
    key = gw.new_key(team)["key"]
    with busy_pool(gw, key):
        return team, _stream(gw, key)


def test_a_retry_after_in_other_digits_is_still_a_503(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    """`²` is a digit to str.isdigit and not to int(): a provider's 429 with it was a 500."""
    provider.canned = (429, [(b"content-type", b"application/json"), (b"retry-after", b"\xb2")], b"{}")
    with make_gateway(overflow_table(fake_worker, provider)) as gw:
        key = gw.new_key(allowed_team(gw))["key"]
        with busy_pool(gw, key):
            reply = post(
                f"{gw.url}/v1/chat/completions",
                {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
                key=key,
            )
        assert reply.status == 503, reply.body
        assert reply.json()["error"]["code"] == "overflow_unavailable"
        assert reply.headers["retry-after"].isascii()
        assert reply.headers["retry-after"].isdigit()


def test_a_providers_mid_stream_error_keeps_its_words(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    """A provider's error event names its organisation and quota: the client learns only that
    the provider failed."""
    words = "Rate limit reached for organization org-S3cretOrg42 on tokens per min (TPM): Limit 30000"
    error = b"data: " + json.dumps({"error": {"message": words, "code": "rate_limit_exceeded"}}).encode()
    provider.canned = (200, _EVENT_STREAM, _delta("tok0 ") + error + b"\n\n")
    with make_gateway(overflow_table(fake_worker, provider)) as gw:
        team, reply = _overflowed_stream(gw)
        assert reply.status == 200
        assert reply.headers["x-sluicegate-served-by"] == "overflow:cloud"
        events = sse_data(reply.body)
        assert b"tok0" in events[0]
        assert b"org-S3cretOrg42" not in reply.body
        assert b"Rate limit reached" not in reply.body
        assert any(b'"error"' in event for event in events)  # it is still told the stream failed
        assert _overflow_row(gw, team)["errors"] == 1


def test_a_stream_is_never_billed_below_what_was_relayed(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    """A provider whose final usage says 0 output tokens after five were relayed is billed five."""
    deltas = b"".join(_delta(f"tok{i} ") for i in range(5))
    stop = _chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}])
    usage = _chunk(choices=[], usage={"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0})
    provider.canned = (200, _EVENT_STREAM, deltas + stop + usage + b"data: [DONE]\n\n")
    with make_gateway(overflow_table(fake_worker, provider)) as gw:
        team, reply = _overflowed_stream(gw)
        assert reply.status == 200
        assert sum(b"tok" in event for event in sse_data(reply.body)) == 5
        row = _overflow_row(gw, team)
        assert row["completion_tokens"] >= 5
        assert row["errors"] == 1  # a report below what was relayed is not believed


def test_a_burst_never_holds_more_than_max_concurrency_at_the_provider(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    """Twelve requests at once while the pool is full and the provider holds every stream it
    takes: the provider sees two at most (its max_concurrency), the rest are the pool's to refuse."""
    provider.fake_headers = {"x-fake-hold-after": "1"}
    table = overflow_table(
        fake_worker, provider, max_concurrency=2, routing={"max_queue": 1, "max_queue_wait": 0.5}
    )
    with make_gateway(table) as gw:
        key = gw.new_key(allowed_team(gw))["key"]
        before = len(provider.received)
        held: list[Any] = []
        refused: list[int] = []

        def one() -> None:
            try:
                stream = gw.client(key).chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "x"}], stream=True
                )
            except openai.APIStatusError as exc:
                refused.append(exc.status_code)
                return
            next(iter(stream))  # the provider is answering it, and holds it until it is closed
            held.append(stream)

        with busy_pool(gw, key):
            threads = [threading.Thread(target=one) for _ in range(12)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            try:
                assert len(held) == 2
                assert refused == [503] * 10
                assert provider.peak == 2
                assert len(provider.received) - before == 2
            finally:
                for stream in held:
                    stream.close()


def test_a_providers_error_object_in_a_200_keeps_its_words(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    """Some providers answer an error with a 200: its words are no answer to relay."""
    words = {"error": {"message": "Quota exceeded for project proj-S3cret99 of org-S3cretOrg42"}}
    provider.canned = (200, [(b"content-type", b"application/json")], json.dumps(words).encode())
    with make_gateway(overflow_table(fake_worker, provider)) as gw:
        team = allowed_team(gw)
        key = gw.new_key(team)["key"]
        with busy_pool(gw, key):
            reply = post(
                f"{gw.url}/v1/chat/completions",
                {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
                key=key,
            )
        assert b"S3cret" not in reply.body, reply.body
        assert reply.status == 502
        assert _overflow_row(gw, team)["errors"] == 1


def test_a_provider_answering_garbage_with_200s_opens_its_breaker(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    """Its head is a 200, its body no answer: each one a failure in a row, not a success at the
    head and a failure after it (which never added up to `failures_to_eject`)."""
    health = {"failures_to_eject": 2, "ejection_base": 600, "ejection_max": 600}
    with make_gateway(overflow_table(fake_worker, provider, health=health)) as gw:
        key = gw.new_key(allowed_team(gw))["key"]
        provider.mode = "garbage"
        before = len(provider.received)
        with busy_pool(gw, key):
            for _ in range(2):
                with pytest.raises(openai.APIStatusError) as raised:
                    chat(gw, key)
                assert raised.value.status_code == 502
            # Its breaker is open: the next request waits for the pool, and its deadline refuses it.
            refused_at_deadline(gw, key)
        assert len(provider.received) - before == 2


def test_a_provider_breaking_every_stream_after_its_first_token_opens_its_breaker(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    """A stream is judged at its end: a first token then a broken connection is a failure, not
    a success at the first token (which reset the run each time)."""
    health = {"failures_to_eject": 2, "ejection_base": 600, "ejection_max": 600}
    with make_gateway(overflow_table(fake_worker, provider, health=health)) as gw:
        key = gw.new_key(allowed_team(gw))["key"]
        provider.fake_headers = {"x-fake-fail-after": "1"}
        before = len(provider.received)
        with busy_pool(gw, key):
            for _ in range(2):
                reply = _stream(gw, key)
                assert reply.status == 200
                events = sse_data(reply.body)
                assert any(b"tok0" in event for event in events)
                assert any(b'"error"' in event for event in events)
            refused_at_deadline(gw, key)
        assert len(provider.received) - before == 2


def test_a_stream_cut_before_its_usage_is_billed_what_was_relayed(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    deltas = b"".join(_delta(f"tok{i} ") for i in range(4))
    provider.canned = (200, _EVENT_STREAM, deltas)  # then the connection ends: no usage, no [DONE]
    with make_gateway(overflow_table(fake_worker, provider)) as gw:
        team, reply = _overflowed_stream(gw)
        assert sum(b"tok" in event for event in sse_data(reply.body)) == 4
        row = _overflow_row(gw, team)
        assert row["completion_tokens"] >= 4
        assert row["errors"] == 1
        assert int(row["requests"]) == 1
