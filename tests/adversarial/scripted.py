"""A scripted raw worker for the adversarial tests: one loopback port, and per connection an async
script (given the parsed request, the reader and the writer) that writes whatever bytes it
likes, when it likes. No HTTP library on the server side, so it can stall half-way through an
event, send header bytes no framework would, or hold a body open forever.

It records the requests it got and, through `gateway_closed`, when the gateway dropped a
connection that the script was still holding open (what makes a real engine stop generating).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from gateway.model_table import HealthConfig, ModelConfig, ModelTable, Timeouts
from tests.pipeline.hostile import Received, _read_request
from tests.servers import listening_socket

MODEL = "review-model"

Script = Callable[["ScriptedWorker", Received, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class ScriptedWorker:
    def __init__(self, script: Script) -> None:
        self._script = script
        self._sock = listening_socket()
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self.gateway_closed = threading.Event()
        self.head_sent = threading.Event()
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    def received(self) -> list[Received]:
        with self._lock:
            return [r for r in self._received if r.method == "POST"]

    async def hold_until_closed(self, reader: asyncio.StreamReader) -> None:
        """Keeps the connection open, sending nothing more, until the gateway drops it."""
        while await reader.read(65536):
            pass
        self.gateway_closed.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._connection, sock=self._sock, limit=1 << 20)
        self._ready.set()
        await self._stop.wait()
        server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            request = await _read_request(reader)
            if request is None:
                return
            with self._lock:
                self._received.append(request)
            if request.method != "POST":
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                await writer.drain()
                return
            await self._script(self, request, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            self.gateway_closed.set()
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError("the scripted worker did not start")

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)
        self._sock.close()


@contextlib.contextmanager
def run_scripted(script: Script) -> Iterator[ScriptedWorker]:
    worker = ScriptedWorker(script)
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


def table(url: str, **timeouts: float) -> ModelTable:
    return ModelTable(
        (
            ModelConfig(
                name=MODEL,
                endpoints=(url,),
                timeouts=Timeouts(**{"connect": 2, "first_token": 20, "idle": 20, "total": 20, **timeouts}),
                health=HealthConfig(failures_to_eject=1000),
            ),
        )
    )


# --- wire helpers ---------------------------------------------------------------------------------

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
    b"connection: close\r\n\r\n"
)


def http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"


def event(payload: object) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def content_chunk(text: str, usage: dict[str, int] | None = None, **extra: Any) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": "chatcmpl-review",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": MODEL,
        "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}],
        **extra,
    }
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def usage_chunk(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-review",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": MODEL,
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


DONE = b"data: [DONE]\n\n"


def held_stream(released: threading.Event, wait_s: float, *, before: int = 3, after: int = 3) -> Script:
    """A chat stream that sends `before` tokens (`t0 `, `t1 `, ... with cumulative usage on each), holds
    until `released` (or until the gateway drops it; `wait_s` at most), then sends `after` more and
    ends."""

    async def script(
        worker: ScriptedWorker, request: Received, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        body = b"".join(_token(i) for i in range(before))
        writer.write(SSE_HEAD + http_chunk(body))
        await writer.drain()
        worker.head_sent.set()
        closed = asyncio.ensure_future(worker.hold_until_closed(reader))
        go_on = asyncio.ensure_future(asyncio.to_thread(released.wait, wait_s))
        await asyncio.wait({closed, go_on}, return_when=asyncio.FIRST_COMPLETED)
        if closed.done() or not go_on.result():
            return
        closed.cancel()
        total = before + after
        rest = b"".join(_token(i) for i in range(before, total))
        writer.write(http_chunk(rest + event(usage_chunk(2, total)) + DONE) + LAST_CHUNK)
        await writer.drain()

    return script


def _token(i: int) -> bytes:
    """Token `i` of a held stream, with the usage so far (2 prompt tokens)."""
    usage = {"prompt_tokens": 2, "completion_tokens": i + 1, "total_tokens": 3 + i}
    return event(content_chunk(f"t{i} ", usage=usage))
