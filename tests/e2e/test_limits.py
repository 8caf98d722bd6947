"""Per-key RPM through the gateway: exact, with OpenAI's headers."""

from __future__ import annotations

from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory
from tests.http import post

BODY = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "hi"}]}


def test_rpm_5_admits_five_and_refuses_the_sixth_with_headers(gateway: Gateway) -> None:
    key = gateway.new_key(rpm=5)
    replies = [post(f"{gateway.url}/v1/chat/completions", BODY, key=key["key"]) for _ in range(6)]
    assert [r.status for r in replies] == [200, 200, 200, 200, 200, 429]
    assert [r.headers["x-ratelimit-remaining-requests"] for r in replies[:5]] == ["4", "3", "2", "1", "0"]
    assert all(r.headers["x-ratelimit-limit-requests"] == "5" for r in replies)
    refused = replies[5]
    assert 1 <= int(refused.headers["retry-after"]) <= 12
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert refused.headers["x-ratelimit-reset-requests"].endswith("s")
    error = refused.json()["error"]
    assert error["code"] == "rate_limit_exceeded"
    assert error["type"] == "rate_limit_error"
    assert key["id"] in error["message"]
    assert "requests per minute" in error["message"]
    # Refused requests are not metered as usage; admitted ones are.
    (row,) = gateway.usage(key["team"])
    assert row["requests"] == 5


def test_stream_carries_rate_limit_headers_before_the_first_byte(gateway: Gateway) -> None:
    key = gateway.new_key(rpm=100)
    client = gateway.client(key["key"])
    with client.chat.completions.with_streaming_response.create(
        model=FAKE_MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
    ) as raw:
        assert raw.headers["x-ratelimit-limit-requests"] == "100"
        assert raw.headers["x-ratelimit-remaining-requests"] == "99"
        assert raw.headers["content-type"].startswith("text/event-stream")
        assert "content-length" not in raw.headers
        assert list(raw.parse())


def test_limits_are_per_key_and_shared_across_gateway_replicas(
    make_gateway: GatewayFactory, gateway: Gateway
) -> None:
    key = gateway.new_key(rpm=4)
    other = gateway.new_key(team=key["team"], rpm=4)
    with make_gateway() as second:
        statuses = []
        for i in range(6):
            url = (gateway.url, second.url)[i % 2]
            statuses.append(post(f"{url}/v1/chat/completions", BODY, key=key["key"]).status)
        assert statuses == [200, 200, 200, 200, 429, 429]
    assert post(f"{gateway.url}/v1/chat/completions", BODY, key=other["key"]).status == 200


def test_a_key_without_rpm_sends_no_rate_limit_headers(gateway: Gateway) -> None:
    reply = post(f"{gateway.url}/v1/chat/completions", BODY, key=gateway.new_key()["key"])
    assert reply.status == 200
    assert "x-ratelimit-limit-requests" not in reply.headers
