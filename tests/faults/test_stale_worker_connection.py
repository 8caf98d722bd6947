"""A pooled worker connection that the worker closed while it sat idle (a worker's keep-alive
ends, or it restarted): the next request finds it gone before writing a byte. That is no failure
of the endpoint's: the request goes on a fresh connection, the client gets its answer, and the
endpoint stays healthy for every team. A connection the worker closes after reading a request is
another matter: the worker may have generated, so that request is never sent again (the worker
counts it once) and the client gets a 502.

The worker is a raw asyncio server that answers the first request on each connection with
keep-alive, then either closes the connection at once (`close_idle`) or reads the next request
on it and drops the connection unanswered."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json

from gateway.model_table import ModelConfig, ModelTable
from gateway.worker.client import KEEPALIVE_S
from tests.conftest import GatewayFactory
from tests.http import post
from tests.routing.conftest import endpoint_view, metric
from tests.servers import read_request, run_raw_server
from tests.waiting import wait_until

MODEL = "m"


class ClosingWorker:
    def __init__(self, *, drop_all: bool = False, close_idle: bool = False) -> None:
        # drop_all: every POST is read whole and then dropped unanswered, on a connection the
        # worker never let idle (a worker that dies mid-generation), and nothing is kept alive.
        self._drop_all = drop_all
        # close_idle: each connection is closed right after its first answer, before any other
        # request can come on it (a worker's keep-alive that ran out).
        self._close_idle = close_idle
        self.posts = 0
        self.answered = 0
        self.dropped = 0
        self.closes_seen = 0  # close_idle: connections whose close the gateway has seen

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served = 0
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head, _ = await read_request(reader)
                is_post = head.startswith(b"POST")
                self.posts += is_post
                if (served or self._drop_all) and is_post:
                    self.dropped += 1
                    writer.transport.abort()  # gone, as a worker whose idle timer fired
                    return
                served += is_post
                body = json.dumps(
                    {
                        "id": "c1",
                        "object": "chat.completion",
                        "model": MODEL,
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": "hi"},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
                    }
                ).encode()
                if head.startswith(b"POST"):
                    self.answered += 1
                # The gateway's probes share its worker client: their connections are never kept,
                # so that only requests' connections meet what each test scripts.
                keep = b"close" if self._drop_all or not is_post else b"keep-alive"
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: %s\r\n"
                    b"content-length: %d\r\n\r\n" % (keep, len(body)) + body
                )
                await writer.drain()
                if not is_post:
                    break
                if self._close_idle:
                    # Closed by the worker, then held until the gateway closes its side: by then
                    # the gateway has seen the close (what the test waits for, not a time).
                    writer.write_eof()
                    while await reader.read(65536):
                        pass
                    self.closes_seen += 1
                    break
                if self._drop_all:
                    break
        writer.close()

    def running(self) -> contextlib.AbstractContextManager[str]:
        return run_raw_server(self._connection)


def _closes_seen(worker: ClosingWorker, n: int) -> bool:
    return worker.closes_seen == n


def test_a_request_finding_its_pooled_connection_closed_goes_on_a_fresh_one(
    make_gateway: GatewayFactory,
) -> None:
    worker = ClosingWorker(close_idle=True)
    with worker.running() as url:
        table = ModelTable((ModelConfig(name=MODEL, endpoints=(url,)),))
        with make_gateway(table) as gw:
            key = gw.new_key()["key"]
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
            for n in range(1, 5):
                reply = post(f"{gw.url}/v1/chat/completions", body, key=key)
                assert reply.status == 200, reply.body
                # The next request finds the pooled connection closed before its write.
                wait_until(functools.partial(_closes_seen, worker, n), 10, "the gateway saw the close")
            # Every request seen once, each on a connection of its own.
            assert (worker.posts, worker.answered, worker.dropped) == (4, 4, 0)
            assert metric(gw, "sluicegate_upstream_errors_total") == 0
            assert endpoint_view(gw, MODEL, url)["state"] == "healthy"


def test_a_request_the_worker_read_on_a_pooled_connection_and_dropped_is_not_sent_again(
    make_gateway: GatewayFactory,
) -> None:
    """The review's case: sending it again on a new connection had the worker see it twice."""
    worker = ClosingWorker()
    with worker.running() as url:
        table = ModelTable((ModelConfig(name=MODEL, endpoints=(url,)),))
        with make_gateway(table) as gw:
            key = gw.new_key()["key"]
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
            assert post(f"{gw.url}/v1/chat/completions", body, key=key).status == 200
            reply = post(f"{gw.url}/v1/chat/completions", body, key=key)
            assert reply.status == 502, reply.body
            assert json.loads(reply.body)["error"]["type"] == "upstream_error"
            assert (worker.posts, worker.answered, worker.dropped) == (2, 1, 1)


def test_a_request_dropped_on_a_fresh_connection_is_not_sent_again(make_gateway: GatewayFactory) -> None:
    """A fresh connection cannot be stale: a worker that read the request on one and then
    dropped it (died mid-generation) may have generated; sending it again would generate twice."""
    worker = ClosingWorker(drop_all=True)
    with worker.running() as url:
        table = ModelTable((ModelConfig(name=MODEL, endpoints=(url,)),))
        with make_gateway(table) as gw:
            key = gw.new_key()["key"]
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
            reply = post(f"{gw.url}/v1/chat/completions", body, key=key)
            assert reply.status >= 500, reply.body
            assert worker.posts == 1


def test_idle_worker_connections_are_closed_before_a_worker_closes_them() -> None:
    assert KEEPALIVE_S < 5.0  # uvicorn's default keep-alive, and so vLLM's
