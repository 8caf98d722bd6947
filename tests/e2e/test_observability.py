"""What an operator sees: metrics that parse, readiness, and logs that never carry a secret."""

from __future__ import annotations

import time

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory
from tests.http import get, post

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi there"}]

FAMILIES = {
    "sluicegate_requests": "counter",
    "sluicegate_request_duration_seconds": "histogram",
    "sluicegate_time_to_first_token_seconds": "histogram",
    "sluicegate_time_per_output_token_seconds": "histogram",
    "sluicegate_tokens": "counter",
    "sluicegate_upstream_errors": "counter",
    "sluicegate_rate_limited": "counter",
    "sluicegate_inflight_requests": "gauge",
}


def _samples(gw: Gateway) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    reply = get(f"{gw.url}/metrics")
    assert reply.status == 200
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(reply.body.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_metrics_parse_and_count_what_happened(gateway: Gateway) -> None:
    key = gateway.new_key(rpm=3)
    client = gateway.client(key["key"])
    client.chat.completions.create(model=FAKE_MODEL, messages=HELLO, extra_headers={"x-fake-tokens": "4"})
    list(
        client.chat.completions.create(
            model=FAKE_MODEL, messages=HELLO, stream=True, extra_headers={"x-fake-tokens": "6"}
        )
    )
    client.chat.completions.create(model=FAKE_MODEL, messages=HELLO)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model=FAKE_MODEL, messages=HELLO)

    reply = get(f"{gateway.url}/metrics")
    families = {f.name: f.type for f in text_string_to_metric_families(reply.body.decode())}
    for name, kind in FAMILIES.items():
        assert families.get(name) == kind, name

    samples = _samples(gateway)
    team = key["team"]
    requests = samples["sluicegate_requests_total"]
    assert requests[(("api", "chat"), ("code", "200"), ("model", FAKE_MODEL), ("team", team))] == 3
    assert requests[(("api", "chat"), ("code", "429"), ("model", FAKE_MODEL), ("team", team))] == 1
    tokens = samples["sluicegate_tokens_total"]
    assert tokens[(("model", FAKE_MODEL), ("team", team), ("type", "completion"))] == 4 + 6 + 8
    assert tokens[(("model", FAKE_MODEL), ("team", team), ("type", "prompt"))] == 2 * 3
    refused = (("limit", "rpm"), ("model", FAKE_MODEL), ("scope", "key"), ("team", team))
    assert samples["sluicegate_rate_limited_total"][refused] == 1
    assert samples["sluicegate_time_to_first_token_seconds_count"][(("model", FAKE_MODEL),)] == 1
    assert samples["sluicegate_time_per_output_token_seconds_count"][(("model", FAKE_MODEL),)] == 1
    assert samples["sluicegate_inflight_requests"][(("model", FAKE_MODEL),)] == 0
    # The metered usage in Redis and the Prometheus counters agree exactly.
    (row,) = gateway.usage(team)
    assert row["completion_tokens"] == 18
    assert row["prompt_tokens"] == 6
    # No label anywhere carries a key id.
    assert key["id"] not in reply.body.decode()


def test_readyz_and_healthz(gateway: Gateway, make_gateway: GatewayFactory) -> None:
    assert get(f"{gateway.url}/healthz").status == 200
    ready = get(f"{gateway.url}/readyz")
    assert ready.status == 200
    assert ready.json()["checks"] == {"redis": "ok", "endpoints": "ok"}
    with make_gateway(redis_url="redis://127.0.0.1:1/0", redis_timeout_s=0.5) as broken:
        reply = get(f"{broken.url}/readyz")
        assert reply.status == 503
        assert reply.json()["checks"]["redis"].startswith("unreachable")
        # With Redis gone, an unknown key gets a clear 503, never a 500 or a hang.
        api = post(
            f"{broken.url}/v1/chat/completions",
            {"model": FAKE_MODEL, "messages": HELLO},
            key="sk-sg-whatever-key",
        )
        assert api.status == 503
        assert api.json()["error"]["code"] == "redis_unavailable"


def test_no_secret_reaches_any_log_line(gateway: Gateway, all_logs: list[str]) -> None:
    key = gateway.new_key(rpm=2)
    secret = key["key"]
    client = gateway.client(secret)
    client.chat.completions.create(model=FAKE_MODEL, messages=HELLO)
    with pytest.raises(openai.APIError, match="broke off"):
        list(
            client.chat.completions.create(
                model=FAKE_MODEL, messages=HELLO, stream=True, extra_headers={"x-fake-fail-after": "1"}
            )
        )
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model=FAKE_MODEL, messages=HELLO)
    # The secret inside bodies and odd headers must not leak either.
    post(f"{gateway.url}/v1/chat/completions", f'{{"model": "{secret}", "messages": ['.encode(), key=secret)
    post(f"{gateway.url}/v1/chat/completions", {"model": secret, "messages": HELLO}, key=secret)
    post(f"{gateway.url}/v1/chat/completions", {"model": FAKE_MODEL, "messages": HELLO}, key=secret + "x")
    post(
        f"{gateway.url}/v1/chat/completions",
        {"model": FAKE_MODEL, "messages": HELLO},
        headers={"authorization": secret},
    )
    gateway.admin.call("DELETE", f"/admin/v1/keys/{key['id']}")
    revoked = post(f"{gateway.url}/v1/chat/completions", {"model": FAKE_MODEL, "messages": HELLO}, key=secret)
    assert revoked.status == 401
    assert secret not in revoked.body.decode()
    text = "\n".join(all_logs)
    assert "sluicegate.access" in text  # the logs were captured at all
    for created in gateway.secrets_created:
        assert created not in text
        assert created[6:20] not in text  # nor a recognisable piece of it
    assert gateway.admin_token not in text
    listing = gateway.admin.call("GET", "/admin/v1/keys", team=key["team"])
    assert secret not in str(listing)


def test_redis_going_away_mid_run_never_breaks_an_answer(make_gateway: GatewayFactory) -> None:
    from gateway.dev.embedded_redis import EmbeddedRedis

    with (
        EmbeddedRedis() as own_redis,
        make_gateway(redis_url=own_redis.url, key_cache_ttl_s=30, redis_timeout_s=0.5) as gw,
    ):
        key = gw.new_key()
        client = gw.client(key["key"])
        client.chat.completions.create(model=FAKE_MODEL, messages=HELLO)
        # That answer's usage is written behind it; a usage report writes what is pending first,
        # so the one record left pending below is the next answer's.
        assert [row["requests"] for row in gw.usage(key["team"])] == [1]
        own_redis.stop()
        # The key is in this replica's cache: the answer still comes; its usage waits in the queue.
        reply = client.chat.completions.create(model=FAKE_MODEL, messages=HELLO)
        assert reply.choices[0].message.content
        deadline = time.monotonic() + 5
        while _samples(gw).get("sluicegate_metering_failures_total", {}).get((), 0) < 1:
            assert time.monotonic() < deadline, "the failed usage write was not counted"
            time.sleep(0.05)
        assert _samples(gw)["sluicegate_metering_pending"][()] == 1
        # An unknown key cannot be checked without Redis: a clear 503.
        refused = post(
            f"{gw.url}/v1/chat/completions",
            {"model": FAKE_MODEL, "messages": HELLO},
            key="sk-sg-unknown-key-1234",
        )
        assert refused.status == 503
        assert refused.json()["error"]["code"] == "redis_unavailable"
