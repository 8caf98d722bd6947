"""Exactly-once settlement on every way a request can end. Admission reserves tokens against the
team's daily budget and takes a concurrency slot; when the request ends, however it ends, it is
settled once: its usage row is written, the budget keeps only what the row bills, the slot is
given back and the in-flight gauge goes back down.

Each path runs on a team with `daily_tokens: 1000000` and a key with `max_concurrency: 1`, then
checks (b) the budget counter in Redis equals the billed tokens, (c) usage shows exactly one
request, (d) `sluicegate_inflight_requests` is 0, and (a) the key's next request is admitted."""

from __future__ import annotations

import secrets
from collections.abc import Callable

import pytest
import redis

from gateway.model_table import ModelConfig, ModelTable, Timeouts
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory
from tests.http import post, sse_data
from tests.pipeline.support import (
    CHAT,
    DEADLINE_S,
    OpenRequest,
    chat,
    envelope,
    inflight,
    usage_totals,
    wait_inflight_zero,
    wait_requests_metered,
)
from tests.servers import free_port
from tests.waiting import wait_until

SLOW = "slow-model"  # the fake worker, with a first-token timeout of half a second
DEAD = "dead-model"  # an endpoint on a port nothing listens on
DAILY_TOKENS = 1_000_000


def _table(fake_worker: str) -> ModelTable:
    return ModelTable(
        (
            ModelConfig(name=FAKE_MODEL, endpoints=(fake_worker,)),
            ModelConfig(
                name=SLOW,
                upstream_model=FAKE_MODEL,
                endpoints=(fake_worker,),
                timeouts=Timeouts(first_token=0.5, total=0.5),
            ),
            ModelConfig(
                name=DEAD, endpoints=(f"http://127.0.0.1:{free_port()}",), timeouts=Timeouts(connect=1)
            ),
        )
    )


def _budgeted_key(gw: Gateway) -> tuple[str, str]:
    team = "team-" + secrets.token_hex(4)
    gw.admin.call("POST", "/admin/v1/teams", {"name": team, "daily_tokens": DAILY_TOKENS})
    return team, gw.new_key(team, max_concurrency=1)["key"]


def _budget_used(redis_client: redis.Redis, team: str) -> int:
    """The team's daily budget counters (one per UTC day: sg:{t:<team>}:rl:budget:d:<YYYY-MM-DD>)."""
    keys = list(redis_client.scan_iter(match=f"sg:{{t:{team}}}:rl:budget:d:*"))
    return sum(int(redis_client.get(k) or 0) for k in keys)


def _assert_settled(gw: Gateway, redis_client: redis.Redis, team: str, requests: int, path: str) -> None:
    totals = wait_requests_metered(gw, team, requests)
    billed = totals["prompt_tokens"] + totals["completion_tokens"]
    try:
        wait_until(lambda: _budget_used(redis_client, team) == billed, DEADLINE_S, "budget settled")
    except AssertionError:
        used = _budget_used(redis_client, team)
        raise AssertionError(
            f"after {path}, the team's daily budget has {used} tokens spent but usage bills {billed}: "
            f"the request's reservation was not settled (usage: {usage_totals(gw, team)})"
        ) from None
    wait_inflight_zero(gw)


def _follow_up(gw: Gateway, key: str, path: str) -> None:
    reply = post(f"{gw.url}{CHAT}", chat(FAKE_MODEL), key=key, headers={"x-fake-tokens": "2"})
    assert reply.status == 200, (
        f"after {path}, the key (1 request at a time) got {reply.status} for its next request: the "
        f"request's concurrency slot was never given back ({reply.body[:200]!r})"
    )


# --- the paths ------------------------------------------------------------------------------------


def _whole_answer(gw: Gateway, key: str) -> None:
    reply = post(f"{gw.url}{CHAT}", chat(FAKE_MODEL), key=key, headers={"x-fake-tokens": "3"})
    assert reply.status == 200


def _stream_to_the_end(gw: Gateway, key: str) -> None:
    reply = post(f"{gw.url}{CHAT}", chat(FAKE_MODEL, stream=True), key=key, headers={"x-fake-tokens": "3"})
    assert reply.status == 200
    assert sse_data(reply.body)[-1] == b"[DONE]"


def _worker_500(gw: Gateway, key: str) -> None:
    reply = post(f"{gw.url}{CHAT}", chat(FAKE_MODEL), key=key, headers={"x-fake-status": "500"})
    envelope(reply, 502, "upstream_error")


def _connect_refused(gw: Gateway, key: str) -> None:
    reply = post(f"{gw.url}{CHAT}", chat(DEAD), key=key)
    envelope(reply, 503, "no_healthy_upstream")


def _first_token_timeout(gw: Gateway, key: str) -> None:
    reply = post(f"{gw.url}{CHAT}", chat(SLOW, stream=True), key=key, headers={"x-fake-stall": "1"})
    envelope(reply, 504, "upstream_timeout")


def _client_gone_before_the_answer(stream: bool) -> Callable[[Gateway, str], None]:
    def run(gw: Gateway, key: str) -> None:
        request = OpenRequest(gw.url, chat(FAKE_MODEL, stream=stream), key=key, headers={"x-fake-stall": "1"})
        try:
            wait_until(lambda: inflight(gw, FAKE_MODEL) == 1, DEADLINE_S, "the request in flight")
        finally:
            request.close()

    return run


def _client_gone_mid_stream(gw: Gateway, key: str) -> None:
    headers = {"x-fake-tokens": "200", "x-fake-token-delay-ms": "20"}
    request = OpenRequest(gw.url, chat(FAKE_MODEL, stream=True), key=key, headers=headers)
    try:
        assert request.response().status == 200
        request.read_content_events(2)
    finally:
        request.close()


def _worker_fails_mid_stream(gw: Gateway, key: str) -> None:
    reply = post(
        f"{gw.url}{CHAT}", chat(FAKE_MODEL, stream=True), key=key, headers={"x-fake-fail-after": "2"}
    )
    assert reply.status == 200
    events = sse_data(reply.body)
    assert events[-1] == b"[DONE]"
    assert any(e.startswith(b'{"error"') for e in events), "the client was not told the stream failed"


PATHS: dict[str, Callable[[Gateway, str], None]] = {
    "a whole answer": _whole_answer,
    "a stream read to its end": _stream_to_the_end,
    "a worker 500": _worker_500,
    "a refused connection": _connect_refused,
    "a first-token timeout": _first_token_timeout,
    "a client gone before the answer": _client_gone_before_the_answer(stream=False),
    "a client gone before the first event": _client_gone_before_the_answer(stream=True),
    "a client gone mid-stream": _client_gone_mid_stream,
    "a worker failing mid-stream": _worker_fails_mid_stream,
}


@pytest.mark.parametrize("path", list(PATHS), ids=[p.removeprefix("a ").replace(" ", "-") for p in PATHS])
def test_every_exit_path_settles_exactly_once(
    make_gateway: GatewayFactory, fake_worker: str, redis_client: redis.Redis, path: str
) -> None:
    with make_gateway(_table(fake_worker)) as gw:
        team, key = _budgeted_key(gw)
        PATHS[path](gw, key)
        _assert_settled(gw, redis_client, team, 1, path)
        _follow_up(gw, key, path)
        _assert_settled(gw, redis_client, team, 2, "the follow-up request")


def test_a_gateway_stopped_mid_stream_settles_the_stream_once(
    make_gateway: GatewayFactory, fake_worker: str, redis_client: redis.Redis
) -> None:
    table = _table(fake_worker)
    request: OpenRequest | None = None
    try:
        with make_gateway(table) as first:
            team, key = _budgeted_key(first)
            headers = {"x-fake-tokens": "1000", "x-fake-token-delay-ms": "20"}
            request = OpenRequest(first.url, chat(FAKE_MODEL, stream=True), key=key, headers=headers)
            assert request.response().status == 200
            request.read_content_events(2)
        # The first gateway has stopped, with the stream still open on the client's side.
    finally:
        if request is not None:
            request.close()
    with make_gateway(table) as second:
        path = "a gateway stopped mid-stream"
        _assert_settled(second, redis_client, team, 1, path)
        _follow_up(second, key, path)
        _assert_settled(second, redis_client, team, 2, "the follow-up request")
