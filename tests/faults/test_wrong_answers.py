"""Answers the gateway will not serve, through the whole gateway against a raw worker: a
compressed answer (the gateway asks for identity: its usage could not be read) and one that
echoes another request's x-request-id (a late answer on a reused connection). Each is a 502 in
the envelope, the request is sent to no worker again (the worker counts it once) and the
connection that carried it is closed."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from gateway.model_table import ModelConfig, ModelTable
from tests.conftest import GatewayFactory
from tests.http import post
from tests.servers import read_request, run_raw_server

MODEL = "m"
BODY = json.dumps(
    {
        "id": "c1",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
).encode()


class Worker:
    def __init__(self, extra_header: bytes) -> None:
        self.extra_header = extra_header
        self.posts: list[bytes] = []

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                while True:
                    head, _ = await read_request(reader)
                    is_post = head.startswith(b"POST")
                    if is_post:
                        self.posts.append(head)
                    # Probes share the gateway's worker client: their connections are not kept.
                    extra = self.extra_header if is_post else b"connection: close\r\n"
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n%scontent-length: %d\r\n\r\n"
                        % (extra, len(BODY))
                        + BODY
                    )
                    await writer.drain()
                    if not is_post:
                        break
        finally:
            writer.close()

    def running(self) -> contextlib.AbstractContextManager[str]:
        return run_raw_server(self._connection)


@pytest.mark.parametrize(
    ("extra_header", "said"),
    [
        (b"content-encoding: gzip\r\n", "compressed"),
        (b"x-request-id: someone-elses\r\n", "x-request-id"),
    ],
)
def test_an_answer_not_served_is_a_502_and_its_request_is_sent_once(
    make_gateway: GatewayFactory, extra_header: bytes, said: str
) -> None:
    # Two endpoints, one list of requests: a request sent again would reach the other.
    worker, other = Worker(extra_header), Worker(extra_header)
    other.posts = worker.posts
    with worker.running() as url, other.running() as other_url:
        table = ModelTable((ModelConfig(name=MODEL, endpoints=(url, other_url)),))
        with make_gateway(table) as gw:
            key = gw.new_key()["key"]
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
            reply = post(f"{gw.url}/v1/chat/completions", body, key=key)
            assert reply.status == 502, reply.body
            error = json.loads(reply.body)["error"]
            assert error["code"] == "upstream_error"
            assert said in error["message"]
            assert len(worker.posts) == 1
            assert b"\r\naccept-encoding: identity\r\n" in worker.posts[0].lower()
