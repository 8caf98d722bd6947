"""A client's `x-request-id` is the client's own label: echoed back, passed on to the worker as
`x-client-request-id`, and never what the gateway keys billing, concurrency slots or settlement
on. The gateway's own id (`x-sluicegate-request-id`, 32 hex characters) is fresh for every request
and is the `x-request-id` the worker sees."""

from __future__ import annotations

import re
import secrets

from tests.conftest import FAKE_MODEL, Gateway, worker_record
from tests.http import post, sse_data
from tests.pipeline.support import CHAT, DEADLINE_S, OpenRequest, chat, inflight, wait_requests_metered
from tests.waiting import wait_until

GATEWAY_ID = "x-sluicegate-request-id"
GATEWAY_ID_RE = re.compile(r"[0-9a-f]{32}")


def test_ten_requests_sharing_a_client_id_are_each_billed(gateway: Gateway) -> None:
    key = gateway.new_key()
    for i in range(10):
        reply = post(
            f"{gateway.url}{CHAT}",
            chat(FAKE_MODEL),
            key=key["key"],
            headers={"x-request-id": "same-id", "x-fake-tokens": "3"},
        )
        assert reply.status == 200, f"request {i + 1} of 10 with a reused x-request-id got {reply.status}"
    totals = wait_requests_metered(gateway, key["team"], 10)
    assert totals["completion_tokens"] == 10 * 3, (
        f"usage bills {totals['completion_tokens']} completion tokens for 10 answers of 3 tokens each"
    )


def test_a_reused_client_id_never_holds_a_concurrency_slot(gateway: Gateway) -> None:
    key = gateway.new_key(max_concurrency=1)
    statuses = [
        post(
            f"{gateway.url}{CHAT}",
            chat(FAKE_MODEL),
            key=key["key"],
            headers={"x-request-id": "same-id", "x-fake-tokens": "2"},
        ).status
        for _ in range(10)
    ]
    assert statuses == [200] * 10, (
        f"10 sequential requests reusing one x-request-id on a key allowing 1 at a time got {statuses}: "
        "a finished request's concurrency slot was not given back"
    )
    wait_requests_metered(gateway, key["team"], 10)


def test_concurrent_requests_sharing_a_client_id_each_take_their_own_slot(gateway: Gateway) -> None:
    """8 held requests on a key allowing 2 at a time: 2 run, 6 are refused, whatever their ids."""
    key = gateway.new_key(max_concurrency=2)
    headers = {"x-request-id": "same-id", "x-fake-stall": "1"}
    opened = [
        OpenRequest(gateway.url, chat(FAKE_MODEL, stream=True), key=key["key"], headers=headers)
        for _ in range(8)
    ]
    statuses: dict[int, int] = {}

    def seen() -> tuple[int, float | None]:
        for i, request in enumerate(opened):
            if i not in statuses and request.answered():
                statuses[i] = request.response().status
        return sum(status == 429 for status in statuses.values()), inflight(gateway, FAKE_MODEL)

    try:
        try:
            wait_until(lambda: seen() == (6, 2), DEADLINE_S, "6 refusals and 2 requests in flight")
        except AssertionError:
            refused, running = seen()
            raise AssertionError(
                f"8 concurrent requests sharing one x-request-id on a key allowing 2 at a time: {refused} "
                f"were refused (want 6) and {running} are in flight (want 2); answers: {statuses}"
            ) from None
        admitted = [i for i in range(8) if statuses.get(i) != 429]
        assert len(admitted) == 2
        for i in admitted:
            assert statuses.get(i) in (None, 200), (
                f"an admitted request was answered {statuses[i]} while its worker was still holding it"
            )
            assert not opened[i].answered() or opened[i].response().status == 200
    finally:
        for request in opened:
            request.close()


def test_the_client_id_is_echoed_and_the_gateway_adds_its_own(gateway: Gateway) -> None:
    key = gateway.new_key()["key"]
    replies = [
        post(
            f"{gateway.url}{CHAT}",
            chat(FAKE_MODEL, stream=stream),
            key=key,
            headers={"x-request-id": "same-id"},
        )
        for stream in (False, False, True)
    ]
    gateway_ids = []
    for reply in replies:
        assert reply.status == 200
        assert reply.headers.get("x-request-id") == "same-id", (
            f"the client sent x-request-id: same-id and got back {reply.headers.get('x-request-id')!r}"
        )
        gateway_id = reply.headers.get(GATEWAY_ID)
        assert gateway_id is not None, f"the answer has no {GATEWAY_ID} header: {sorted(reply.headers)}"
        assert GATEWAY_ID_RE.fullmatch(gateway_id), f"{GATEWAY_ID} is {gateway_id!r}, not 32 hex characters"
        gateway_ids.append(gateway_id)
    assert len(set(gateway_ids)) == 3, f"requests sharing a client id got the same gateway ids: {gateway_ids}"
    assert sse_data(replies[2].body)[-1] == b"[DONE]"


def test_an_answer_without_a_client_id_still_carries_both_ids(gateway: Gateway) -> None:
    reply = post(f"{gateway.url}{CHAT}", chat(FAKE_MODEL), key=gateway.new_key()["key"])
    assert reply.status == 200
    assert reply.headers.get("x-request-id"), "an answer carries no x-request-id"
    gateway_id = reply.headers.get(GATEWAY_ID)
    assert gateway_id is not None, f"the answer has no {GATEWAY_ID} header"
    assert GATEWAY_ID_RE.fullmatch(gateway_id), f"{GATEWAY_ID} is {gateway_id!r}, not 32 hex characters"


def test_the_worker_gets_the_gateway_id_and_the_client_id_apart(gateway: Gateway, fake_worker: str) -> None:
    key = gateway.new_key()["key"]
    client_id = "client-label-" + secrets.token_hex(4)
    reply = post(f"{gateway.url}{CHAT}", chat(FAKE_MODEL), key=key, headers={"x-request-id": client_id})
    assert reply.status == 200
    gateway_id = reply.headers.get(GATEWAY_ID)
    assert gateway_id is not None, f"the answer has no {GATEWAY_ID} header"
    record = worker_record(fake_worker, gateway_id)
    assert record is not None, (
        f"the worker received no request whose x-request-id is the gateway's id {gateway_id}: the worker's "
        "logs cannot be joined with the gateway's"
    )
    headers = record["headers"]
    assert headers.get("x-request-id") == gateway_id
    assert headers.get("x-client-request-id") == client_id, (
        f"the worker got x-client-request-id {headers.get('x-client-request-id')!r}, not the client's "
        f"{client_id!r}"
    )
