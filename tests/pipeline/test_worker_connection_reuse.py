"""A stream the worker ended as it should leaves its worker connection to the next request, as a
whole answer does: a connection per stream cost a connect, a round trip through the worker, before
every stream's first token. A stream that ended any other way (an error event here) closes its
connection, which is what makes an engine stop generating.

The worker is a raw asyncio server that counts connections and answers each streamed request
with one content event, the usage event and `[DONE]`, or with an error event when the prompt
says "fail"."""

from __future__ import annotations

import asyncio
import contextlib
import json

from gateway.model_table import ModelConfig, ModelTable
from tests.conftest import GatewayFactory
from tests.http import post, sse_data
from tests.servers import read_request, run_raw_server

MODEL = "m"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(payload: dict[str, object]) -> bytes:
    return _chunk(b"data: " + json.dumps(payload).encode() + b"\n\n")


class CountingWorker:
    def __init__(self) -> None:
        self.connections = 0  # that carried a request (the health probes come on their own)
        self.posts = 0
        self.closed_by_gateway = 0

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        carried_a_post = False
        try:
            while True:
                head, data = await read_request(reader)
                if not head.startswith(b"POST"):  # the gateway's health probes
                    models = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                        % (len(models), models.encode())
                    )
                    continue
                self.posts += 1
                if not carried_a_post:
                    carried_a_post = True
                    self.connections += 1
                body = json.loads(data)
                chunk = {"id": "c1", "object": "chat.completion.chunk", "model": MODEL}
                if "fail" in json.dumps(body["messages"]):
                    events = _event({"error": {"message": "out of memory"}})
                else:
                    events = _event(
                        {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}]}
                    ) + _event(
                        {
                            **chunk,
                            "choices": [],
                            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
                        }
                    )
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                    + events
                    + _chunk(b"data: [DONE]\n\n")
                    + b"0\r\n\r\n"
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed_by_gateway += carried_a_post
        finally:
            writer.close()

    def running(self) -> contextlib.AbstractContextManager[str]:
        return run_raw_server(self._connection)


def _table(url: str) -> ModelTable:
    return ModelTable((ModelConfig(name=MODEL, endpoints=(url,)),))


def _stream(url: str, key: str, prompt: str) -> list[bytes]:
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": prompt}]}
    reply = post(f"{url}/v1/chat/completions", body, key=key)
    assert reply.status == 200, reply.body
    return sse_data(reply.body)


def test_streams_that_end_as_they_should_share_one_worker_connection(make_gateway: GatewayFactory) -> None:
    worker = CountingWorker()
    with worker.running() as url, make_gateway(_table(url)) as gw:
        key = gw.new_key()["key"]
        for _ in range(4):
            assert _stream(gw.url, key, "hello")[-1] == b"[DONE]"
        assert worker.posts == 4
        assert worker.connections == 1
        assert worker.closed_by_gateway == 0


def test_a_stream_that_fails_closes_its_worker_connection(make_gateway: GatewayFactory) -> None:
    worker = CountingWorker()
    with worker.running() as url, make_gateway(_table(url)) as gw:
        key = gw.new_key()["key"]
        failed = _stream(gw.url, key, "fail")
        assert b"out of memory" in b"".join(failed)
        assert _stream(gw.url, key, "hello")[-1] == b"[DONE]"
        assert worker.connections == 2  # the failed stream's was not used again
