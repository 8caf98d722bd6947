"""A worker that answers with broken HTTP, redirects or error bodies of its own shape: the client
always gets the gateway's OpenAI envelope with a status it can act on, and the request leaves
nothing behind (its concurrency slot, its in-flight gauge, its usage row as an error).

The hostile worker listens on two ports, configured as the model's two endpoints, so a retry on
"another endpoint" reaches it too and is counted."""

from __future__ import annotations

import pytest

from tests.conftest import GatewayFactory
from tests.http import post
from tests.pipeline.hostile import MODEL, REDIRECT_PATH, HostileWorker
from tests.pipeline.support import (
    CHAT,
    chat,
    envelope,
    hostile_headers,
    hostile_table,
    wait_inflight_zero,
    wait_requests_metered,
)

MALFORMED = ("bad-status-line", "huge-header", "bad-content-length", "not-http")
STREAM = pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])


@STREAM
@pytest.mark.parametrize("mode", MALFORMED)
def test_a_malformed_worker_answer_is_a_502_envelope(
    make_gateway: GatewayFactory, hostile: HostileWorker, mode: str, stream: bool
) -> None:
    with make_gateway(hostile_table(hostile.urls)) as gw:
        key = gw.new_key()
        reply = post(
            f"{gw.url}{CHAT}", chat(MODEL, stream=stream), key=key["key"], headers=hostile_headers(mode)
        )
        envelope(reply, 502, "upstream_error")


@STREAM
@pytest.mark.parametrize("mode", MALFORMED)
def test_a_malformed_worker_answer_is_tried_at_most_twice(
    make_gateway: GatewayFactory, hostile: HostileWorker, mode: str, stream: bool
) -> None:
    with make_gateway(hostile_table(hostile.urls)) as gw:
        key = gw.new_key()
        reply = post(
            f"{gw.url}{CHAT}", chat(MODEL, stream=stream), key=key["key"], headers=hostile_headers(mode)
        )
        attempts = hostile.count(mode)
        assert 1 <= attempts <= 2, (
            f"one client request reached the worker {attempts} times: a broken worker gets hammered "
            f"(the client got {reply.status} {reply.body[:200]!r})"
        )


@STREAM
@pytest.mark.parametrize("mode", MALFORMED)
def test_a_malformed_worker_answer_leaves_nothing_behind(
    make_gateway: GatewayFactory, hostile: HostileWorker, mode: str, stream: bool
) -> None:
    with make_gateway(hostile_table(hostile.urls)) as gw:
        key = gw.new_key(max_concurrency=1)
        failed = post(
            f"{gw.url}{CHAT}", chat(MODEL, stream=stream), key=key["key"], headers=hostile_headers(mode)
        )
        assert failed.status != 200, f"a {mode} answer reached the client as a success"
        follow_up = post(f"{gw.url}{CHAT}", chat(MODEL), key=key["key"], headers=hostile_headers("ok"))
        assert follow_up.status == 200, (
            f"after a {mode} answer, the next request on a key allowing 1 at a time got {follow_up.status}: "
            f"the failed request's concurrency slot was not given back ({follow_up.body[:200]!r})"
        )
        totals = wait_requests_metered(gw, key["team"], 2)
        assert totals["errors"] == 1, f"usage counts {totals['errors']} errors for one {mode} failure"
        wait_inflight_zero(gw, MODEL)


@STREAM
def test_a_worker_redirect_is_not_followed(
    make_gateway: GatewayFactory, hostile: HostileWorker, stream: bool
) -> None:
    with make_gateway(hostile_table(hostile.urls)) as gw:
        key = gw.new_key()
        reply = post(
            f"{gw.url}{CHAT}", chat(MODEL, stream=stream), key=key["key"], headers=hostile_headers("redirect")
        )
        followed = hostile.count(path=REDIRECT_PATH)
        assert followed == 0, (
            f"the gateway followed a worker's redirect ({followed} requests reached the Location): a "
            "compromised worker could send the client's request anywhere"
        )
        envelope(reply, 502, "upstream_error")
        assert 1 <= hostile.count("redirect") <= 2


# --- error bodies in the worker's own shape -------------------------------------------------------

WORKER_4XX = [("error-string", 418), ("error-int-code", 400), ("html-400", 400), ("huge-error", 400)]


@STREAM
@pytest.mark.parametrize(("mode", "status"), WORKER_4XX)
def test_a_worker_4xx_keeps_its_status_in_the_gateway_envelope(
    make_gateway: GatewayFactory, hostile: HostileWorker, mode: str, status: int, stream: bool
) -> None:
    with make_gateway(hostile_table(hostile.urls)) as gw:
        key = gw.new_key()
        reply = post(
            f"{gw.url}{CHAT}", chat(MODEL, stream=stream), key=key["key"], headers=hostile_headers(mode)
        )
        error = envelope(reply, status)
        assert "<html" not in error["message"].lower(), "the worker's HTML page was relayed as the message"
        if mode == "error-int-code":
            assert "bad thing" in error["message"], (
                f"the worker's message 'bad thing' was lost: the client sees {error['message']!r}"
            )


@STREAM
def test_a_worker_html_502_is_an_upstream_error(
    make_gateway: GatewayFactory, hostile: HostileWorker, stream: bool
) -> None:
    with make_gateway(hostile_table(hostile.urls)) as gw:
        key = gw.new_key()
        reply = post(
            f"{gw.url}{CHAT}", chat(MODEL, stream=stream), key=key["key"], headers=hostile_headers("html-502")
        )
        error = envelope(reply, 502, "upstream_error")
        assert "<html" not in error["message"].lower(), "the worker's HTML page was relayed as the message"
        assert 1 <= hostile.count("html-502") <= 2
