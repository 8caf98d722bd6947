"""Client-chosen engine ids: vLLM takes a body's `request_id` as its own id for the request (its
Responses store keys stored responses by it), and `kv_transfer_params` names another request's KV
blocks. A client could reach another team's state with either, so neither reaches the worker.

A real gateway in front of the fake worker, which records each body it got."""

from __future__ import annotations

import pytest

from tests.conftest import FAKE_MODEL, Gateway, worker_record
from tests.http import post

ENGINE_IDS = {
    "request_id": "chatcmpl-another-teams-id",
    "kv_transfer_params": {"remote_block_ids": [1, 2]},
    "priority": -100,  # ahead of every other team in a priority-scheduling engine
}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/completions", {"prompt": "hi"}),
    ],
)
def test_engine_ids_a_client_chose_do_not_reach_the_worker(
    gateway: Gateway, fake_worker: str, path: str, body: dict[str, object]
) -> None:
    key = gateway.new_key()["key"]
    reply = post(f"{gateway.url}{path}", {"model": FAKE_MODEL, **body, **ENGINE_IDS}, key=key)
    assert reply.status == 200, reply.body
    record = worker_record(fake_worker, reply.headers["x-request-id"])
    assert record is not None
    assert not set(ENGINE_IDS) & set(record["body"]), record["body"]
