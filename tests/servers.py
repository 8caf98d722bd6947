"""Real servers on real loopback sockets, for tests that must see what a client sees.

An in-process ASGI transport buffers whole bodies and never disconnects, so it cannot show SSE
timing or a client hanging up; every streaming test goes through one of these instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import hiredis
import uvicorn

from gateway.config import Settings
from gateway.edge.server import uvicorn_config


def free_port() -> int:
    """A port free now, for servers started as other processes (it may be taken by the time they
    bind: in-process servers use `listening_socket` instead)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def listening_socket() -> socket.socket:
    """A socket already bound to a free loopback port: no other process can take it meanwhile."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextlib.contextmanager
def run_uvicorn(
    app: Any,
    *,
    sock: socket.socket | None = None,
    timeout_s: float = 10.0,
    settings: Settings | None = None,
    loop: str = "asyncio",
) -> Iterator[str]:
    """Serve `app` with uvicorn in a background thread; yield its base URL; stop it on exit.

    The server is configured as `sluicegate serve` configures it (the connection bounds of
    `settings`, default ones unless given), on asyncio rather than uvloop unless `loop` says."""
    sock = sock or listening_socket()
    port = sock.getsockname()[1]
    settings = settings or Settings()
    # No log config of uvicorn's own (uvicorn_config): its records reach the root logger, where
    # tests read them.
    config = uvicorn_config(app, settings, loop=loop, graceful_shutdown_s=2, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"uvicorn-{port}", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"uvicorn on port {port} exited during startup")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise TimeoutError(f"uvicorn on port {port} did not start in {timeout_s}s")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=timeout_s)
        sock.close()


RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One HTTP/1.1 request from a raw connection: its head, and its body by content-length."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head, await reader.readexactly(length)


@contextlib.contextmanager
def run_raw_server(handler: RawHandler) -> Iterator[str]:
    """A raw asyncio server (`handler` per connection, bytes exactly as a test scripts them) on an
    event loop in a thread of its own; yields its base URL; stops it on exit."""
    sock = listening_socket()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(asyncio.start_server(handler, sock=sock), loop).result(10)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:

        async def stop() -> None:
            server.close()
            await server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        sock.close()


class ScriptedRedisServer:
    """A Redis that misbehaves as the test says, on a real socket (`asyncio.start_server(fake.serve,
    ...)`): answers every command but EVALSHA with +OK (redis-py's handshake); EVALSHA per `mode`,
    "ok" with `reply` (RESP bytes, `:1` unless set)."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.reply = b":1\r\n"
        self.opened = 0
        self.closed = 0
        self.evalsha = 0
        self.blocked = 0
        self.held: list[asyncio.StreamWriter] = []
        self.changed = asyncio.Event()  # a connection opened or closed, or an EVALSHA arrived
        self.idle_writers: list[asyncio.StreamWriter] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.opened += 1
        self.changed.set()
        parser = hiredis.Reader()
        try:
            while data := await reader.read(65536):
                parser.feed(data)
                while (command := parser.gets()) is not False:
                    self._answer(command, writer)
        finally:
            self.closed += 1
            self.changed.set()
            writer.close()

    def _answer(self, command: list[bytes], writer: asyncio.StreamWriter) -> None:
        if command[0].upper() == b"BLPOP":
            self.blocked += 1  # held, as Redis holds a BLPOP on an empty list
            self.changed.set()
            return
        if command[0].upper() != b"EVALSHA":
            writer.write(b"+OK\r\n")
            return
        self.evalsha += 1
        self.changed.set()
        if self.mode == "ok":
            writer.write(self.reply)
            self.idle_writers.append(writer)
        elif self.mode == "push first":
            writer.write(b">2\r\n$11\r\nMAINTENANCE\r\n$1\r\nx\r\n:1\r\n")
        elif self.mode == "false":
            writer.write(b"#f\r\n")
        elif self.mode == "twice":
            writer.write(b":1\r\n:2\r\n")
        elif self.mode == "garbage":
            writer.write(b"?not resp\r\n")
        else:  # "silent": no answer, until answer_held()
            self.held.append(writer)

    def answer_held(self) -> None:
        for writer in self.held:
            writer.write(b":1\r\n")
        self.held.clear()

    async def until(self, done: Callable[[], bool]) -> None:
        """Waits for a condition on the counters, woken by each change."""
        while not done():
            self.changed.clear()
            await self.changed.wait()
