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
