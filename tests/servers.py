"""Real servers on real loopback sockets, for tests that must see what a client sees.

An in-process ASGI transport buffers whole bodies and never disconnects, so it cannot show SSE
timing or a client hanging up; every streaming test goes through one of these instead.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn


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
def run_uvicorn(app: Any, *, sock: socket.socket | None = None, timeout_s: float = 10.0) -> Iterator[str]:
    """Serve `app` with uvicorn in a background thread; yield its base URL; stop it on exit."""
    sock = sock or listening_socket()
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        # No log config of uvicorn's own: its records reach the root logger, where tests read them.
        log_config=None,
        access_log=False,
        lifespan="on",
        loop="asyncio",
        http="httptools",
        timeout_graceful_shutdown=2,
    )
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
