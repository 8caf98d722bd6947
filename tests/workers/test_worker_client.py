"""gateway/worker/client.py and connection.py, the HTTP/1.1 client of the worker
call, against raw servers on real sockets that answer exactly the bytes each test scripts:
keep-alive reuse, the bounds on an answer's head and on the unread body it holds, answers that end
with their connection or break off, a stream's last chunk after its end, a second answer to one
request, a cancelled request, a header that would split a request, and a connect that fails for
want of this process's descriptors."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable

import pytest

from gateway.worker.client import WorkerClient
from gateway.worker.connection import MAX_HEAD_BYTES, WorkerResponse
from gateway.worker.http import BrokenOff, Malformed
from tests.servers import read_request
from tests.waiting import eventually

OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
DEADLINE_S = 10.0

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Server:
    """Counts connections and requests; `answer` writes each request's answer."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self.closed = asyncio.Event()  # a connection the client closed
        self.url = ""
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head, body = await read_request(reader)
                self.requests.append(head + body)
                await self.answer(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed.set()
        finally:
            writer.close()


def answering(data: bytes, *, then_close: bool = False) -> Answer:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(data)
        await writer.drain()
        if then_close:
            writer.close()
            raise ConnectionError

    return answer


async def read_all(response: WorkerResponse) -> bytes:
    parts = []
    while part := await response.content.readany():
        parts.append(part)
    return b"".join(parts)


async def post(client: WorkerClient, server: Server, headers: dict[str, str] | None = None) -> WorkerResponse:
    return await asyncio.wait_for(
        client.post(server.url, "/v1/chat/completions", b"{}", headers or {}, connect_s=DEADLINE_S),
        DEADLINE_S,
    )


def test_a_connection_is_kept_alive_for_the_next_request_and_closed_with_the_client() -> None:
    async def scenario() -> tuple[list[bytes], int, bool]:
        async with Server(answering(OK)) as server:
            client = WorkerClient()
            bodies = []
            for _ in range(3):
                response = await post(client, server, {"x-request-id": "r1"})
                bodies.append(await read_all(response))
                response.release()
            await client.aclose()
            await asyncio.wait_for(server.closed.wait(), DEADLINE_S)
            return (
                bodies,
                server.connections,
                server.requests[0].startswith(b"POST /v1/chat/completions HTTP/1.1"),
            )

    bodies, connections, framed = asyncio.run(scenario())
    assert bodies == [b"{}"] * 3
    assert connections == 1
    assert framed


def test_an_idle_connection_past_the_keep_alive_is_not_used_again() -> None:
    async def scenario() -> int:
        async with Server(answering(OK)) as server:
            client = WorkerClient(keepalive_s=-1.0)  # every idle connection has idled too long
            for _ in range(2):
                response = await post(client, server)
                await read_all(response)
                response.release()
            await asyncio.wait_for(server.closed.wait(), DEADLINE_S)  # the first, closed by the client
            await client.aclose()
            return server.connections

    assert asyncio.run(scenario()) == 2


def test_an_answer_read_in_part_closes_its_connection() -> None:
    async def scenario() -> int:
        body = b"x" * 100_000
        answer = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        async with Server(answering(answer)) as server:
            client = WorkerClient()
            response = await post(client, server)
            response.release()  # unread: the connection cannot carry another request
            await asyncio.wait_for(server.closed.wait(), DEADLINE_S)
            response = await post(client, server)
            assert await read_all(response) == body
            response.release()
            await client.aclose()
            return server.connections

    assert asyncio.run(scenario()) == 2


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nx-long: " + b"a" * 9000 + b"\r\ncontent-length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\n"
        + b"x-many: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n" * 2000
        + b"content-length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nx-endless: " + b"a" * (MAX_HEAD_BYTES * 4),
        b"SMTP ready\r\n\r\n",
    ],
    ids=["long-line", "many-lines", "never-ends", "not-http"],
)
def test_a_head_past_its_bounds_or_not_http_is_malformed(head: bytes) -> None:
    async def scenario() -> type[BaseException]:
        async with Server(answering(head)) as server:
            client = WorkerClient()
            try:
                with pytest.raises(Malformed) as raised:
                    await post(client, server)
                await asyncio.wait_for(server.closed.wait(), DEADLINE_S)
            finally:
                await client.aclose()
            return raised.type

    assert asyncio.run(scenario()) is Malformed


def test_an_answer_without_a_length_ends_with_its_connection_and_is_not_kept() -> None:
    async def scenario() -> tuple[bytes, int]:
        answer = answering(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nall of it", then_close=True)
        async with Server(answer) as server:
            client = WorkerClient()
            response = await post(client, server)
            body = await read_all(response)
            response.release()
            response = await post(client, server)
            await read_all(response)
            response.release()
            await client.aclose()
            return body, server.connections

    assert asyncio.run(scenario()) == (b"all of it", 2)


def test_a_chunked_answer_cut_off_is_broken_off_after_what_arrived() -> None:
    async def scenario() -> tuple[bytes, type[BaseException]]:
        answer = answering(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n10\r\nonly part",
            then_close=True,
        )
        async with Server(answer) as server:
            client = WorkerClient()
            response = await post(client, server)
            first = b""
            error: type[BaseException] | None = None
            try:
                while True:
                    first += await response.content.readany()
            except BrokenOff as exc:
                error = type(exc)
            response.close()
            await client.aclose()
            return first, error

    first, error = asyncio.run(scenario())
    assert first.startswith(b"hello")
    assert error is BrokenOff


STREAM_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
DONE_CHUNK = b"e\r\ndata: [DONE]\n\n\r\n"


def ending_later(after_done: asyncio.Event, then: bytes) -> Answer:
    """A stream whose `[DONE]` event comes in one write and `then` (its last chunk, or more body)
    once `after_done` is set: a worker whose answer's end trails the stream's end."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(STREAM_HEAD + DONE_CHUNK)
        await writer.drain()
        await after_done.wait()
        after_done.clear()
        writer.write(then)
        await writer.drain()

    return answer


async def read_to_done(response: WorkerResponse) -> bytes:
    seen = b""
    while b"[DONE]" not in seen:
        seen += await response.content.readany()
    return seen


def test_a_stream_whose_last_chunk_trails_its_end_goes_back_to_the_pool_when_it_comes() -> None:
    async def scenario() -> int:
        after_done = asyncio.Event()
        async with Server(ending_later(after_done, b"0\r\n\r\n")) as server:
            client = WorkerClient()
            for _ in range(3):
                response = await post(client, server)
                await read_to_done(response)
                assert not response.content.is_eof()  # the answer's end is still to come
                response.release(linger_s=DEADLINE_S)
                after_done.set()
                await eventually(lambda: any(client._idle.values()), "the connection back in the pool")
            await client.aclose()
            return server.connections

    assert asyncio.run(scenario()) == 1


@pytest.mark.parametrize(
    "then",
    [b"", b'f\r\ndata: {"x":1}\n\n\r\n0\r\n\r\n'],
    ids=["no-end-in-time", "body-after-the-end"],
)
def test_a_stream_whose_answer_does_not_end_cleanly_after_its_end_is_closed(then: bytes) -> None:
    """No end within the linger, or more body after the event that ended the stream: the
    connection is closed, never pooled."""

    async def scenario() -> int:
        after_done = asyncio.Event()
        async with Server(ending_later(after_done, then)) as server:
            client = WorkerClient()
            response = await post(client, server)
            await read_to_done(response)
            response.release(linger_s=0.05 if not then else DEADLINE_S)
            after_done.set()
            await asyncio.wait_for(server.closed.wait(), DEADLINE_S)
            response = await post(client, server)  # on a new connection
            await read_to_done(response)
            response.close()
            await client.aclose()
            return server.connections

    assert asyncio.run(scenario()) == 2


def test_a_second_answer_to_one_request_closes_the_connection_and_leaves_the_first_whole() -> None:
    async def scenario() -> tuple[bytes, int]:
        async with Server(answering(OK + OK)) as server:
            client = WorkerClient()
            response = await post(client, server)
            body = await read_all(response)
            response.release()
            await asyncio.wait_for(server.closed.wait(), DEADLINE_S)
            response = await post(client, server)  # not on the connection that answered twice
            await read_all(response)
            response.release()
            await client.aclose()
            return body, server.connections

    assert asyncio.run(scenario()) == (b"{}", 2)


def test_the_start_of_a_second_answer_is_never_given_to_the_next_request() -> None:
    """A worker that answers one request twice, the second answer's head cut across two reads:
    the rest must not become the next request's answer (another team's, perhaps)."""

    async def scenario() -> list[bytes]:
        answered: set[asyncio.StreamWriter] = set()

        async def twice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if writer not in answered:  # a connection's first request: its answer, and more
                answered.add(writer)
                writer.write(OK + b"HTTP/1.1 200 OK\r\ncontent-length: 8\r\nx: y")
            else:  # a later request on the same connection: the rest of that, then its own
                writer.write(b"\r\n\r\nleftover" + OK)
            await writer.drain()

        async with Server(twice) as server:
            client = WorkerClient()
            bodies = []
            for _ in range(2):
                response = await post(client, server)
                bodies.append(await read_all(response))
                response.release()
            await client.aclose()
            return bodies

    assert asyncio.run(scenario()) == [b"{}", b"{}"]


def test_trailers_that_never_end_are_bounded() -> None:
    async def scenario() -> type[BaseException] | None:
        async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nx-t: ")
            for _ in range(64):  # 64 MiB of one trailer line, unless the client stops it
                writer.write(b"a" * (1024 * 1024))
                await writer.drain()

        async with Server(endless) as server:
            client = WorkerClient()
            response = await post(client, server)
            error: type[BaseException] | None = None
            try:
                await read_all(response)
            except BrokenOff as exc:
                error = type(exc)
            response.close()
            await client.aclose()
            return error

    assert asyncio.run(scenario()) is BrokenOff


def test_a_pooled_connection_lost_after_part_of_an_answer_is_not_sent_again() -> None:
    """Only a pooled connection that closes before any byte of an answer is stale: one that
    closes mid-head had a worker that read the request (it may have generated)."""

    async def scenario() -> tuple[type[BaseException] | None, int]:
        calls = 0

        async def half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal calls
            calls += 1
            writer.write(OK if calls == 1 else b"HTTP/1.1 200 OK\r\ncontent-")
            await writer.drain()
            if calls > 1:
                raise ConnectionError

        async with Server(half) as server:
            client = WorkerClient()
            response = await post(client, server)
            await read_all(response)
            response.release()
            error: type[BaseException] | None = None
            try:
                await post(client, server)
            except Malformed as exc:
                error = type(exc)
            await client.aclose()
            return error, len(server.requests)

    assert asyncio.run(scenario()) == (Malformed, 2)


def test_a_request_cancelled_before_its_answer_closes_its_connection() -> None:
    async def scenario() -> int:
        arrived = asyncio.Event()

        async def never(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            arrived.set()
            await reader.read(1)  # until the client closes
            raise ConnectionError

        async with Server(never) as server:
            client = WorkerClient()
            call = asyncio.ensure_future(post(client, server))
            await asyncio.wait_for(arrived.wait(), DEADLINE_S)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await asyncio.wait_for(server.closed.wait(), DEADLINE_S)
            await client.aclose()
            return len(server.requests)

    assert asyncio.run(scenario()) == 1


def test_a_header_with_a_line_break_is_never_sent() -> None:
    async def scenario() -> int:
        async with Server(answering(OK)) as server:
            client = WorkerClient()
            with pytest.raises(ValueError, match="line break"):
                await post(client, server, {"x-request-id": "a\r\nx-injected: 1"})
            await client.aclose()
            return len(server.requests)

    assert asyncio.run(scenario()) == 0


def test_a_reader_that_does_not_read_holds_a_bounded_part_of_the_answer() -> None:
    """The server writes 64 MiB at once, more than the kernel's buffers on both sides hold: a
    client that never paused reading would hold nearly all of it. Once it has paused (its
    transport state, polled), it holds at most its high-water mark plus one read."""

    async def scenario() -> int:
        async def huge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            size = 64 * 1024 * 1024
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
            writer.write(b"x" * size)
            await writer.drain()  # until the client closes, if it stopped reading

        async with Server(huge) as server:
            client = WorkerClient()
            response = await post(client, server)
            connection = response._conn  # the transport state this test waits for
            assert connection is not None
            for _ in range(1000):
                if connection._paused:
                    break
                await asyncio.sleep(0.01)
            assert connection._paused, "the client never paused reading"
            held = len(response.content.read_nowait())
            response.close()
            await client.aclose()
            return held

    assert asyncio.run(scenario()) <= 512 * 1024


def test_a_connect_without_a_descriptor_left_is_local_exhaustion_not_the_workers() -> None:
    """In a child process whose descriptor limit is its open descriptors: the socket() of the
    connect fails with EMFILE."""
    script = textwrap.dedent(
        """
        import asyncio, os, resource
        from gateway.worker.client import WorkerClient
        from gateway.worker.http import LocalExhaustion

        async def main():
            client = WorkerClient()
            used = len(os.listdir("/proc/self/fd"))
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (used + 8, hard))
            held = []
            try:
                while True:  # every descriptor left, taken
                    held.append(os.open("/dev/null", os.O_RDONLY))
            except OSError:
                pass
            try:
                await client.post("http://127.0.0.1:9", "/v1/chat/completions", b"{}", {}, connect_s=5)
            except LocalExhaustion as exc:
                print("local", exc)
            except Exception as exc:
                print("other", type(exc).__name__, exc)

        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.startswith("local"), (done.stdout, done.stderr[-2000:])
