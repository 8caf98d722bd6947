"""Bad input and broken workers: always a clear status and the OpenAI envelope, never a 500 or a hang."""

from __future__ import annotations

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from gateway.model_table import ModelConfig, ModelTable, Timeouts
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory
from tests.http import get, post, sse_data
from tests.servers import free_port

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


def _assert_envelope(body: dict[str, object], code: str) -> None:
    assert set(body) == {"error"}
    error = body["error"]
    assert isinstance(error, dict)
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code
    assert isinstance(error["message"], str)
    assert error["message"]


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        (b'{"model": "fake-model", "messages": [', "invalid_json", None),
        (b"[1, 2]", "invalid_request", None),
        (b'{"messages": []}', "invalid_request", "model"),
        (b'{"model": "fake-model"}', "invalid_request", "messages"),
        (b'{"model": "fake-model", "messages": "hi"}', "invalid_request", "messages"),
        (b'{"model": "fake-model", "messages": [{"content": "x"}]}', "invalid_request", "messages[0]"),
        (
            b'{"model": "fake-model", "messages": [{"role": "user"}], "stream": "yes"}',
            "invalid_request",
            "stream",
        ),
        (
            b'{"model": "fake-model", "messages": [{"role": "user"}], "max_tokens": -1}',
            "invalid_request",
            "max_tokens",
        ),
        (
            b'{"model": "fake-model", "messages": [{"role": "user"}], "stream_options": 1}',
            "invalid_request",
            "stream_options",
        ),
    ],
)
def test_bad_requests_are_400_with_the_field_named(
    gateway: Gateway, body: bytes, code: str, param: str | None
) -> None:
    key = gateway.new_key()["key"]
    reply = post(f"{gateway.url}/v1/chat/completions", body, key=key)
    assert reply.status == 400
    _assert_envelope(reply.json(), code)
    assert reply.json()["error"]["param"] == param


def test_oversize_body_is_413_before_it_is_read(make_gateway: GatewayFactory) -> None:
    with make_gateway(max_body_bytes=1024) as gw:
        key = gw.new_key()["key"]
        big = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "x" * 5000}]}
        reply = post(f"{gw.url}/v1/chat/completions", big, key=key)
        assert reply.status == 413
        _assert_envelope(reply.json(), "request_too_large")
        assert (
            post(f"{gw.url}/v1/chat/completions", {"model": FAKE_MODEL, "messages": HELLO}, key=key).status
            == 200
        )


def test_unknown_route_and_wrong_method_use_the_envelope(gateway: Gateway) -> None:
    missing = get(f"{gateway.url}/v1/nothing-here")
    assert missing.status == 404
    _assert_envelope(missing.json(), "not_found")
    wrong = get(f"{gateway.url}/v1/chat/completions")
    assert wrong.status == 405
    _assert_envelope(wrong.json(), "method_not_allowed")


def test_worker_down_is_503_and_metered_as_an_error(make_gateway: GatewayFactory) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    table = ModelTable((ModelConfig(name="down", endpoints=(dead,), timeouts=Timeouts(connect=1)),))
    with make_gateway(table) as gw:
        key = gw.new_key()
        with pytest.raises(openai.APIStatusError) as err:
            gw.client(key["key"]).chat.completions.create(model="down", messages=HELLO)
        assert err.value.status_code == 503
        assert err.value.body["code"] == "no_healthy_upstream"  # type: ignore[index]
        # The model and pool, never where the worker runs: agents print this to their user.
        message = err.value.body["message"]  # type: ignore[index]
        assert "'down'" in message
        assert "127.0.0.1" not in message
        assert dead.rsplit(":", 1)[1] not in message
        (row,) = gw.usage(key["team"])
        assert (row["requests"], row["errors"], row["prompt_tokens"]) == (1, 1, 0)


def test_a_dead_endpoint_is_skipped_by_retrying_on_another(
    make_gateway: GatewayFactory, fake_worker: str
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    table = ModelTable((ModelConfig(name=FAKE_MODEL, endpoints=(dead, fake_worker)),))
    with make_gateway(table) as gw:
        client = gw.client(gw.new_key()["key"])
        for _ in range(6):  # both orders of the two endpoints come up
            assert client.chat.completions.create(model=FAKE_MODEL, messages=HELLO).choices


def test_worker_503_is_retried_and_then_reported(gateway: Gateway) -> None:
    key = gateway.new_key()["key"]
    reply = post(
        f"{gateway.url}/v1/chat/completions",
        {"model": FAKE_MODEL, "messages": HELLO},
        key=key,
        headers={"x-fake-status": "503"},
    )
    assert reply.status == 503
    _assert_envelope(reply.json(), "no_healthy_upstream")
    assert reply.headers["retry-after"] == "1"


def test_worker_4xx_envelope_is_passed_to_the_client(gateway: Gateway) -> None:
    key = gateway.new_key()["key"]
    reply = post(
        f"{gateway.url}/v1/chat/completions",
        {"model": FAKE_MODEL, "messages": HELLO},
        key=key,
        headers={"x-fake-status": "400"},
    )
    assert reply.status == 400
    assert set(reply.json()["error"]) >= {"message", "type"}


def test_worker_500_is_a_502_for_the_client(gateway: Gateway) -> None:
    key = gateway.new_key()["key"]
    reply = post(
        f"{gateway.url}/v1/chat/completions",
        {"model": FAKE_MODEL, "messages": HELLO},
        key=key,
        headers={"x-fake-status": "500"},
    )
    assert reply.status == 502
    _assert_envelope(reply.json(), "upstream_error")


def test_a_stalled_worker_is_cut_off_at_the_first_token_timeout(
    make_gateway: GatewayFactory, fake_worker: str
) -> None:
    table = ModelTable(
        (ModelConfig(name=FAKE_MODEL, endpoints=(fake_worker,), timeouts=Timeouts(first_token=1, total=1)),)
    )
    with make_gateway(table) as gw:
        key = gw.new_key()["key"]
        for stream in (True, False):  # the worker stalls for 600 s: only the gateway's cut ends these
            reply = post(
                f"{gw.url}/v1/chat/completions",
                {"model": FAKE_MODEL, "messages": HELLO, "stream": stream},
                key=key,
                headers={"x-fake-stall": "1"},
            )
            assert reply.status == 504
            _assert_envelope(reply.json(), "upstream_timeout")


def test_worker_that_goes_quiet_mid_stream_gets_an_error_event(
    make_gateway: GatewayFactory, fake_worker: str
) -> None:
    # The worker sends its role chunk at once (not output: it keeps no deadline alive), then
    # pauses far longer than the timeouts before each token.
    timeouts = Timeouts(first_token=0.5, idle=0.5)
    table = ModelTable((ModelConfig(name=FAKE_MODEL, endpoints=(fake_worker,), timeouts=timeouts),))
    with make_gateway(table) as gw:
        key = gw.new_key()["key"]
        reply = post(
            f"{gw.url}/v1/chat/completions",
            {"model": FAKE_MODEL, "messages": HELLO, "stream": True},
            key=key,
            headers={"x-fake-tokens": "3", "x-fake-token-delay-ms": "30000"},
        )
        assert reply.status == 200
        events = sse_data(reply.body)
        assert b"upstream_timeout" in events[-2]
        assert events[-1] == b"[DONE]"
        contents = [e for e in events[:-2] if b'"content":"' in e and b'"content":""' not in e]
        assert len(contents) < 3, "the stream ran to its end: the quiet worker was never cut off"


def test_worker_failing_mid_stream_gives_one_error_event_then_done(gateway: Gateway) -> None:
    key = gateway.new_key()
    reply = post(
        f"{gateway.url}/v1/chat/completions",
        {"model": FAKE_MODEL, "messages": HELLO, "stream": True},
        key=key["key"],
        # Spaced tokens arrive in reads of their own; the last may share a read with the broken
        # connection, and what sits in such a read is lost with it.
        headers={"x-fake-tokens": "10", "x-fake-fail-after": "4", "x-fake-token-delay-ms": "30"},
    )
    assert reply.status == 200
    assert "content-length" not in reply.headers
    events = sse_data(reply.body)
    assert events[-1] == b"[DONE]"
    error_events = [e for e in events if e.startswith(b'{"error"')]
    assert len(error_events) == 1
    assert error_events[0] == events[-2]
    assert b"upstream_error" in error_events[0]
    relayed = sum(b'"content":"tok' in e for e in events)
    assert 3 <= relayed <= 4
    (row,) = gateway.usage(key["team"])
    # Metered: exactly the tokens the client received.
    assert (row["requests"], row["errors"], row["completion_tokens"]) == (1, 1, relayed)


def test_sdk_raises_on_a_mid_stream_failure(gateway: Gateway) -> None:
    client = gateway.client(gateway.new_key()["key"])
    stream = client.chat.completions.create(
        model=FAKE_MODEL, messages=HELLO, stream=True, extra_headers={"x-fake-fail-after": "2"}
    )
    with pytest.raises(openai.APIError, match="stream"):
        for _ in stream:
            pass
