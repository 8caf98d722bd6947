"""What an independent review checked by hand on the worker call's HTTP/1.1 client
(gateway/worker/client.py), pinned against raw servers on real sockets: informational
answers, a 101, chunked answers with trailers, a close after the head, bytes after a complete
answer, a pooled connection closed before the write against one closed after the worker read the
request (the worker counts each request: none is seen twice), a compressed answer, and an answer
echoing another request's id."""

from __future__ import annotations

import asyncio

import pytest

from gateway.worker.client import WorkerClient
from gateway.worker.http import BrokenOff, Malformed, Unanswered, WorkerHttpError, WrongAnswer
from tests.waiting import eventually
from tests.workers.test_worker_client import OK, Answer, Server, answering, post, read_all


def first_then_dropped(data: bytes) -> Answer:
    """Answers the first request with `data`; reads each later one whole, then drops its
    connection unanswered."""
    answered = False

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal answered
        if answered:
            writer.transport.abort()
            raise ConnectionError
        answered = True
        writer.write(data)
        await writer.drain()

    return answer


async def _one(client: WorkerClient, server: Server, headers: dict[str, str] | None = None) -> bytes:
    response = await post(client, server, headers)
    body = await read_all(response)
    response.release()
    return body


def _error_of(answer: Answer, headers: dict[str, str] | None = None) -> tuple[type[BaseException], int, bool]:
    """The error one request meets, the requests the worker saw, and whether it saw the close."""

    async def scenario() -> tuple[type[BaseException], int, bool]:
        async with Server(answer) as server:
            client = WorkerClient()
            with pytest.raises(WorkerHttpError) as caught:
                await _one(client, server, headers)
            await asyncio.wait_for(server.closed.wait(), 10)
            await client.aclose()
            return type(caught.value), len(server.requests), server.closed.is_set()

    return asyncio.run(scenario())


def test_informational_answers_before_the_answer_are_skipped_and_the_connection_kept() -> None:
    early = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>; rel=preload\r\n\r\n"

    async def scenario() -> tuple[list[bytes], int]:
        async with Server(answering(early + OK)) as server:
            client = WorkerClient()
            bodies = [await _one(client, server), await _one(client, server)]
            await client.aclose()
            return bodies, server.connections

    assert asyncio.run(scenario()) == ([b"{}", b"{}"], 1)


def test_a_101_is_no_answer_and_its_connection_is_closed() -> None:
    switching = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n"
    error, requests, closed = _error_of(answering(switching + b"\x81\x00"))
    assert (issubclass(error, Malformed), requests, closed) == (True, 1, True)


def test_a_chunked_answer_with_trailers_is_read_whole_and_its_connection_reused() -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n"
        b"trailer: x-usage\r\n\r\n1\r\n{\r\n1\r\n}\r\n0\r\nx-usage: 7\r\n\r\n"
    )

    async def scenario() -> tuple[list[bytes], int, bool]:
        async with Server(answering(chunked)) as server:
            client = WorkerClient()
            response = await post(client, server)
            body = await read_all(response)
            trailer_in_head = "x-usage" in response.headers
            response.release()
            bodies = [body, await _one(client, server)]
            await client.aclose()
            return bodies, server.connections, trailer_in_head

    assert asyncio.run(scenario()) == ([b"{}", b"{}"], 1, False)


def test_a_close_after_the_head_breaks_the_body_off() -> None:
    head_only = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 10\r\n\r\n"
    error, requests, _ = _error_of(answering(head_only, then_close=True))
    assert (error, requests) == (BrokenOff, 1)


def test_bytes_after_a_complete_answer_close_its_connection_and_reach_no_other_request() -> None:
    async def scenario() -> tuple[list[bytes], int]:
        first = True

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal first
            writer.write(OK)
            await writer.drain()
            if first:  # then, on its own, bytes no request asked for
                first = False
                await asyncio.sleep(0)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nforged")
                await writer.drain()

        async with Server(answer) as server:
            client = WorkerClient()
            bodies = [await _one(client, server)]
            await asyncio.wait_for(server.closed.wait(), 10)  # the client closed that connection
            bodies.append(await _one(client, server))
            await client.aclose()
            return bodies, server.connections

    assert asyncio.run(scenario()) == ([b"{}", b"{}"], 2)


def test_a_pooled_connection_found_closed_before_the_write_is_replaced_and_each_request_sent_once() -> None:
    async def scenario() -> tuple[list[bytes], int, int]:
        async with Server(answering(OK, then_close=True)) as server:  # answers, then closes
            client = WorkerClient()
            first = await _one(client, server)
            await asyncio.wait_for(server.closed.wait(), 10)
            # The client has seen the close: the pooled connection is gone before the next write.
            await eventually(lambda: not any(client._idle.values()), "the close seen by the client")
            second = await _one(client, server)
            await client.aclose()
            return [first, second], len(server.requests), server.connections

    assert asyncio.run(scenario()) == ([b"{}", b"{}"], 2, 2)


def test_a_pooled_connection_closed_after_the_worker_read_the_request_is_not_sent_again() -> None:
    """The review's case: the worker read the request on a reused connection, then closed it
    unanswered. Sending it again on a new connection would have the worker see it twice."""

    async def scenario() -> tuple[type[BaseException] | None, int, int]:
        async with Server(first_then_dropped(OK)) as server:
            client = WorkerClient()
            await _one(client, server)
            error: type[BaseException] | None = None
            try:
                await _one(client, server)
            except WorkerHttpError as exc:
                error = type(exc)
            await client.aclose()
            return error, len(server.requests), server.connections

    assert asyncio.run(scenario()) == (Unanswered, 2, 1)


def test_identity_is_asked_for_and_a_compressed_answer_refused() -> None:
    gzipped = b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: 2\r\n\r\n\x1f\x8b"

    async def scenario() -> tuple[type[BaseException] | None, bytes, bool]:
        async with Server(answering(gzipped)) as server:
            client = WorkerClient()
            error: type[BaseException] | None = None
            try:
                await _one(client, server)
            except WorkerHttpError as exc:
                error = type(exc)
            await asyncio.wait_for(server.closed.wait(), 10)
            await client.aclose()
            return error, server.requests[0], server.closed.is_set()

    error, request, closed = asyncio.run(scenario())
    assert error is WrongAnswer
    assert b"\r\nAccept-Encoding: identity\r\n" in request
    assert closed


def test_an_answer_echoing_another_request_id_is_refused_and_its_connection_closed() -> None:
    def echoing(request_id: bytes) -> Answer:
        return answering(b"HTTP/1.1 200 OK\r\nx-request-id: %s\r\ncontent-length: 2\r\n\r\n{}" % request_id)

    error, requests, closed = _error_of(echoing(b"someone-else"), {"x-request-id": "mine"})
    assert (error, requests, closed) == (WrongAnswer, 1, True)

    async def matching() -> tuple[bytes, int]:
        async with Server(echoing(b"mine")) as server:
            client = WorkerClient()
            body = await _one(client, server, {"x-request-id": "mine"})
            await client.aclose()
            return body, server.connections

    assert asyncio.run(matching()) == (b"{}", 1)
