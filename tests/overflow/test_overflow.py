"""Overflow end to end: a real gateway, the fake worker as its pool, and a real HTTPS provider
with a private CA that checks its key and records what it received."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import openai
import pytest

from tests.conftest import Gateway, GatewayFactory
from tests.http import post
from tests.overflow.conftest import MODEL, allowed_team, busy_pool, chat, overflow_table, refused_at_deadline
from tests.overflow.provider import Provider
from tests.waiting import wait_until

SERVED_BY = "x-sluicegate-served-by"


def _rows(gw: Gateway, team: str, count: int) -> list[dict[str, Any]]:
    """The team's usage rows once `count` requests are metered."""
    found: list[dict[str, Any]] = []

    def metered() -> bool:
        found[:] = gw.usage(team)
        return sum(int(r["requests"]) for r in found) >= count

    wait_until(metered, 10, "the usage to be metered")
    return found


def _cloud_row(gw: Gateway, team: str) -> dict[str, Any]:
    """The one overflow row among the team's usage rows, once its two requests are metered."""
    (row,) = [r for r in _rows(gw, team, 2) if r["served_by"] == "overflow:cloud"]
    return row


def test_a_busy_pool_overflows_for_an_allowed_team(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    with make_gateway(overflow_table(fake_worker, provider)) as gw:
        team = allowed_team(gw)
        key = gw.new_key(team)
        before = len(provider.received)
        with busy_pool(gw, key["key"]):
            raw = chat(gw, key["key"], extra_headers={"x-internal-secret": "s3cr3t"})
        answer = raw.parse()
        assert raw.headers[SERVED_BY] == "overflow:cloud"
        assert answer.model == MODEL  # the name the client asked for, not the provider's
        assert answer.usage.completion_tokens == 8
        (seen,) = provider.received[before:]
        assert seen["path"] == "/v1/chat/completions"
        assert seen["headers"]["authorization"] == f"Bearer {provider.key}"
        assert seen["body"]["model"] == "provider-model"
        rows = _rows(gw, team, 2)
        overflow = [r for r in rows if r["served_by"] == "overflow:cloud"]
        assert len(overflow) == 1
        row = overflow[0]
        prompt, completion = answer.usage.prompt_tokens, answer.usage.completion_tokens
        assert (row["prompt_tokens"], row["completion_tokens"]) == (prompt, completion)
        # At the provider's prices, exactly.
        cost = (Decimal(prompt) * Decimal("3.00") + Decimal(completion) * Decimal("15.00")) / 10**6
        assert Decimal(row["cost"]) == cost
        pool_rows = [r for r in rows if r["served_by"] is None]
        assert sum(int(r["requests"]) for r in pool_rows) == 1


def test_the_provider_sees_no_salt_team_key_or_internal_header(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    with make_gateway(overflow_table(fake_worker, provider, after_ms=0)) as gw:
        team = allowed_team(gw)
        key = gw.new_key(team)
        before = len(provider.received)
        with busy_pool(gw, key["key"]):
            client = gw.client(key["key"])
            stream = client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "hello there"}],
                stream=True,
                user="end-user-7",
                extra_body={
                    "cache_salt": "client-salt-1",
                    "min_p": 0.1,
                    "store": True,
                    "metadata": {"a": "b"},
                },
                extra_headers={"x-fake-tokens": "99", "x-sluicegate-deadline-ms": "60000"},
            )
            chunks = list(stream)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).startswith("tok0")
        (seen,) = provider.received[before:]
        dump = json.dumps(seen)
        for secret in (team, key["id"], key["key"], "client-salt-1", "end-user-7", "x-fake-tokens"):
            assert secret not in dump
        body, headers = seen["body"], seen["headers"]
        assert body["stream_options"] == {"include_usage": True}
        assert not {"cache_salt", "min_p", "store", "metadata", "user"} & set(body)
        assert not [h for h in headers if h.startswith("x-")]  # no request id, traceparent, forwarded-for
        assert "traceparent" not in headers
        row = _cloud_row(gw, team)
        assert row["completion_tokens"] == 8  # the provider's own usage chunk, metered once
        assert int(row["requests"]) == 1


def test_a_denied_team_or_key_is_refused_early(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    with make_gateway(overflow_table(fake_worker, provider)) as gw:
        denied_team = gw.new_team()
        allowed = allowed_team(gw)
        keys = [
            gw.new_key(denied_team)["key"],
            gw.new_key(allowed, overflow="denied")["key"],
        ]
        before = len(provider.received)
        with busy_pool(gw, gw.new_key(allowed)["key"]):
            for key in keys:
                with pytest.raises(openai.APIStatusError) as raised:
                    chat(gw, key, extra_headers={"x-sluicegate-deadline-ms": "60000"})
                assert raised.value.status_code == 503
                assert raised.value.body["code"] == "overflow_not_allowed"  # type: ignore[index]
                assert "retry-after" in raised.value.response.headers
        assert len(provider.received) == before


def test_an_unhealthy_pool_overflows(make_gateway: GatewayFactory, provider: Provider) -> None:
    from tests.servers import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    table = overflow_table(dead, provider, health={"probe_interval": 0.1})
    with make_gateway(table) as gw:
        team = allowed_team(gw)
        key = gw.new_key(team)["key"]
        denied = gw.new_key(gw.new_team())["key"]

        def down() -> bool:
            text = json.dumps(gw.admin.call("GET", "/admin/v1/models"))
            return '"unhealthy"' in text and '"healthy_endpoints": 0' in text

        wait_until(down, 10, "the dead endpoint's probe to fail")
        raw = chat(gw, key)
        assert raw.headers[SERVED_BY] == "overflow:cloud"
        with pytest.raises(openai.APIStatusError) as raised:
            chat(gw, denied)
        assert raised.value.body["code"] == "overflow_not_allowed"  # type: ignore[index]


def test_provider_429s_open_its_breaker(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    table = overflow_table(
        fake_worker, provider, health={"failures_to_eject": 2, "ejection_base": 600, "ejection_max": 600}
    )
    with make_gateway(table) as gw:
        key = gw.new_key(allowed_team(gw))["key"]
        provider.fake_headers = {"x-fake-status": "429"}
        before = len(provider.received)
        with busy_pool(gw, key):
            for _ in range(2):
                with pytest.raises(openai.APIStatusError) as raised:
                    chat(gw, key)
                assert raised.value.status_code == 503
                assert raised.value.body["code"] == "overflow_unavailable"  # type: ignore[index]
                assert int(raised.value.response.headers["retry-after"]) >= 1
                message = raised.value.body["message"]  # type: ignore[index]
                assert provider.url not in message  # nothing of the provider's internals
                assert "provider-model" not in message
            # The breaker is open: the next request is not sent to the provider; it waits for the
            # pool as without an overflow, and its deadline refuses it.
            refused_at_deadline(gw, key)
        assert len(provider.received) - before == 2


def test_tls_is_verified_against_the_system_store_without_ca_file(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    """No ca_file: the system store, which does not know the test CA, so the provider is refused."""
    with make_gateway(overflow_table(fake_worker, provider, ca_file=False)) as gw:
        key = gw.new_key(allowed_team(gw))["key"]
        before = len(provider.received)
        with busy_pool(gw, key), pytest.raises(openai.APIStatusError) as raised:
            chat(gw, key)
        assert raised.value.body["code"] == "overflow_unavailable"  # type: ignore[index]
        assert len(provider.received) == before  # no request crossed an unverified connection


@pytest.mark.parametrize("mode", ["garbage", "redirect"])
def test_a_hostile_provider_is_bounded(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider, mode: str
) -> None:
    with make_gateway(overflow_table(fake_worker, provider)) as gw:
        team = allowed_team(gw)
        key = gw.new_key(team)["key"]
        provider.mode = mode
        before = len(provider.received)
        with busy_pool(gw, key), pytest.raises(openai.APIStatusError) as raised:
            chat(gw, key)
        expected = {"garbage": (502, "upstream_error"), "redirect": (503, "overflow_unavailable")}[mode]
        assert (raised.value.status_code, raised.value.body["code"]) == expected  # type: ignore[index]
        assert "elsewhere" not in json.dumps(raised.value.body)
        assert len(provider.received) == before + 1  # a redirect is never followed
        row = _cloud_row(gw, team)
        assert (row["prompt_tokens"], row["completion_tokens"], row["errors"]) == (0, 0, 1)


def test_absurd_usage_is_not_billed(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    with make_gateway(overflow_table(fake_worker, provider)) as gw:
        team = allowed_team(gw)
        key = gw.new_key(team)["key"]
        provider.mode = "absurd_usage"
        with busy_pool(gw, key):
            raw = chat(gw, key, max_tokens=50)
        assert raw.parse().choices[0].message.content == "hi"
        row = _cloud_row(gw, team)
        assert row["prompt_tokens"] < 1000
        assert row["completion_tokens"] <= 50


def test_a_provider_that_never_answers_is_cut_at_the_deadline(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    table = overflow_table(fake_worker, provider, timeouts={"total": 1, "first_token": 1})
    with make_gateway(table) as gw:
        team = allowed_team(gw)
        key = gw.new_key(team)["key"]
        provider.fake_headers = {"x-fake-stall": "1"}
        with busy_pool(gw, key), pytest.raises(openai.APIStatusError) as raised:
            chat(gw, key)
        assert raised.value.body["code"] == "overflow_unavailable"  # type: ignore[index]
        row = _cloud_row(gw, team)
        assert (row["prompt_tokens"], row["completion_tokens"], row["errors"]) == (0, 0, 1)


def test_a_translated_messages_request_reaches_the_provider_as_chat(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    with make_gateway(overflow_table(fake_worker, provider)) as gw:
        team = allowed_team(gw)
        key = gw.new_key(team)
        before = len(provider.received)
        with busy_pool(gw, key["key"]):
            reply = post(
                f"{gw.url}/v1/messages",
                {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi there"}]},
                headers={"x-api-key": key["key"], "anthropic-version": "2023-06-01"},
            )
        assert reply.status == 200, reply.body
        assert reply.headers[SERVED_BY] == "overflow:cloud"
        assert reply.json()["type"] == "message"
        assert reply.json()["usage"]["output_tokens"] == 8
        (seen,) = provider.received[before:]
        assert seen["path"] == "/v1/chat/completions"
        assert seen["body"]["messages"] == [{"role": "user", "content": "hi there"}]
        assert key["key"] not in json.dumps(seen)


def test_a_client_that_leaves_mid_stream_is_metered_once(
    make_gateway: GatewayFactory, fake_worker: str, provider: Provider
) -> None:
    with make_gateway(overflow_table(fake_worker, provider)) as gw:
        team = allowed_team(gw)
        key = gw.new_key(team)["key"]
        provider.fake_headers = {"x-fake-hold-after": "3", "x-fake-tokens": "10"}
        with busy_pool(gw, key):
            stream = gw.client(key).chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "a b c"}], stream=True
            )
            texts = []
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    texts.append(chunk.choices[0].delta.content)
                if len(texts) == 3:
                    break
            stream.close()
            (row,) = [r for r in _rows(gw, team, 1) if r["served_by"] == "overflow:cloud"]
        assert int(row["requests"]) == 1
        assert row["disconnects"] == 1
        assert row["completion_tokens"] >= 3  # never below what reached the client


def test_an_open_breaker_and_a_down_pool_are_overflow_unavailable(
    make_gateway: GatewayFactory, provider: Provider
) -> None:
    from tests.servers import free_port

    health = {"probe_interval": 0.1, "failures_to_eject": 1, "ejection_base": 600, "ejection_max": 600}
    with make_gateway(overflow_table(f"http://127.0.0.1:{free_port()}", provider, health=health)) as gw:
        key = gw.new_key(allowed_team(gw))["key"]

        def down() -> bool:
            return '"healthy_endpoints": 0' in json.dumps(gw.admin.call("GET", "/admin/v1/models"))

        wait_until(down, 10, "the dead endpoint's probe to fail")
        provider.fake_headers = {"x-fake-status": "503"}
        before = len(provider.received)
        for _ in range(2):
            with pytest.raises(openai.APIStatusError) as raised:
                chat(gw, key)
            assert raised.value.body["code"] == "overflow_unavailable"  # type: ignore[index]
        assert len(provider.received) - before == 1  # the second found its breaker open
