"""A hostile worker: a raw asyncio TCP server that answers each request with whatever broken or
lying HTTP the request's `x-hostile: <mode>` header asks for (the gateway forwards unknown client
headers to its worker), and counts what reached it.

No HTTP library is involved on the server side, so it can send what no framework would: a bad
status line, a 64 KB header, a non-numeric content-length, bytes that are not HTTP at all. Every
answer closes the connection, so one TCP connection is one attempt.

It listens on one or more loopback ports at once (`urls`): a model configured with two of them
has two distinct endpoints, both counted here, so a retry on "another endpoint" is visible.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tests.servers import listening_socket

MODE_HEADER = "x-hostile"
MODEL = "hostile-model"
# Where `redirect` sends the client; a gateway that follows it shows up here.
REDIRECT_PATH = "/redirect-target"
HUGE = 9223372036854775807

# The lies a usage report can tell: (field, value). Mode `usage-<name>` tells it in a whole answer
# (or in the final usage chunk when the request streams); `stream-usage-<name>` is the same lie,
# named for a streaming request.
USAGE_LIES: dict[str, tuple[str, Any]] = {
    "huge": ("prompt_tokens", HUGE),
    "negative": ("completion_tokens", -5),
    "string": ("completion_tokens", "12"),
    "float": ("completion_tokens", 1.5),
}
HONEST_USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
CONTENT = ("tok0 ", "tok1 ")

_REASONS = {
    200: "OK",
    302: "Found",
    400: "Bad Request",
    404: "Not Found",
    418: "I'm a teapot",
    502: "Bad Gateway",
}
# Bytes from no protocol the gateway speaks (a TLS ClientHello's start, then noise).
_NOT_HTTP = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\x8f\x00\xff\xfe garbage \x00\x01\x02\r\n\r\n"
_HTML = b"<html><head><title>%d</title></head><body><h1>%d %s</h1><p>nginx</p></body></html>"


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def mode(self) -> str | None:
        return self.headers.get(MODE_HEADER)

    @property
    def streams(self) -> bool:
        try:
            payload = json.loads(self.body)
        except ValueError:
            return False
        return isinstance(payload, dict) and payload.get("stream") is True


def _head(status: int, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _json_answer(status: int, payload: object) -> bytes:
    body = json.dumps(payload).encode()
    headers = [
        ("content-type", "application/json"),
        ("content-length", str(len(body))),
        ("connection", "close"),
    ]
    return _head(status, headers) + body


def _html_answer(status: int) -> bytes:
    body = _HTML % (status, status, _REASONS[status].encode())
    headers = [("content-type", "text/html"), ("content-length", str(len(body))), ("connection", "close")]
    return _head(status, headers) + body


def _completion(model: str, usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-hostile",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(CONTENT)},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": usage,
    }


def _stream_events(model: str, usage: dict[str, Any]) -> list[bytes]:
    def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        payload = {
            "id": "chatcmpl-hostile",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": model,
            "choices": choices,
            **extra,
        }
        return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"

    def choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

    events = [chunk([choice({"role": "assistant", "content": ""})])]
    events += [chunk([choice({"content": text})]) for text in CONTENT[:-1]]
    events.append(chunk([choice({"content": CONTENT[-1]}, "stop")]))
    events.append(chunk([], usage=usage))
    events.append(b"data: [DONE]\n\n")
    return events


def _chunked_stream(events: list[bytes]) -> bytes:
    headers = [
        ("content-type", "text/event-stream"),
        ("transfer-encoding", "chunked"),
        ("connection", "close"),
    ]
    out = [_head(200, headers)]
    out += [b"%x\r\n%s\r\n" % (len(event), event) for event in events]
    out.append(b"0\r\n\r\n")
    return b"".join(out)


def _holding_stream(kind: str) -> Callable[[HostileWorker, Received], bytes]:
    """A chat stream that makes a translation hold more than it may until the end: `candidates`
    (more choice indexes than a request can ask for), `calls` (one candidate, more tool calls than
    an answer needs) or `arguments` (one call's argument fragments, over 4 MiB in all). Each
    event is small; the stream ends properly, so only the translation's bound cuts it short."""

    def events() -> list[bytes]:
        def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            payload = {"id": "chatcmpl-hold", "object": "chat.completion.chunk", "choices": choices, **extra}
            return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"

        def call(position: int, arguments: str, name: str | None = None) -> dict[str, Any]:
            if name is None:  # a later fragment: only the arguments
                return {"index": position, "function": {"arguments": arguments}}
            return {
                "index": position,
                "id": f"call_{position}",
                "function": {"name": name, "arguments": arguments},
            }

        if kind == "candidates":
            out = [chunk([{"index": i, "delta": {"content": "x"}}]) for i in range(64)]
        elif kind == "calls":
            out = [
                chunk([{"index": 0, "delta": {"tool_calls": [call(i, "{}", name="f")]}}]) for i in range(512)
            ]
        else:
            fragment = '"' + "a" * (64 * 1024) + '",'
            out = [chunk([{"index": 0, "delta": {"tool_calls": [call(0, '{"k":[', name="f")]}}])]
            out += [chunk([{"index": 0, "delta": {"tool_calls": [call(0, fragment)]}}]) for _ in range(80)]
            out.append(chunk([{"index": 0, "delta": {"tool_calls": [call(0, '""]}')]}}]))
        out.append(chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
        out.append(chunk([], usage=dict(HONEST_USAGE)))
        return [*out, b"data: [DONE]\n\n"]

    return lambda worker, request: _chunked_stream(events())


def _lying_usage(mode: str) -> dict[str, Any] | None:
    name = mode.removeprefix("stream-").removeprefix("usage-")
    if not mode.removeprefix("stream-").startswith("usage-") or name not in USAGE_LIES:
        return None
    field, value = USAGE_LIES[name]
    usage: dict[str, Any] = {**HONEST_USAGE, field: value}
    if name == "huge":
        usage["total_tokens"] = HUGE
    return usage


class HostileWorker:
    """Started by `run_hostile`; `urls` are its endpoints, `count` what reached it."""

    def __init__(self, ports: int) -> None:
        self._sockets = [listening_socket() for _ in range(ports)]
        self.urls = tuple(f"http://127.0.0.1:{s.getsockname()[1]}" for s in self._sockets)
        self._received: list[Received] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._thread = threading.Thread(target=self._run, name=f"hostile-{self.url}", daemon=True)

    @property
    def url(self) -> str:
        return self.urls[0]

    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    def count(self, mode: str | None = None, *, path: str | None = None) -> int:
        """Requests received with `x-hostile: mode` (any mode when None) and/or at `path`.
        Without either, every request that carried an `x-hostile` header."""
        return sum(
            1
            for r in self.received()
            if (mode is None or r.mode == mode)
            and (path is None or r.path == path)
            and (path is not None or r.mode is not None)
        )

    # --- the server thread -------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError("the hostile worker did not start in 10 s")

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and self._thread.is_alive():
            loop.call_soon_threadsafe(stop.set)
        self._thread.join(timeout=10)
        for sock in self._sockets:
            sock.close()

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        servers = []
        for sock in self._sockets:
            servers.append(await asyncio.start_server(self._connection, sock=sock, limit=1 << 20))
        self._ready.set()
        await self._stop.wait()
        for server in servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in servers:
            await server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            request = await _read_request(reader)
            if request is not None:
                with self._lock:
                    self._received.append(request)
                writer.write(self._answer(request))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    def _answer(self, request: Received) -> bytes:
        if request.path == REDIRECT_PATH:
            return _json_answer(200, _completion(MODEL, HONEST_USAGE))
        if request.method == "GET":
            if request.path == "/health":
                return _json_answer(200, {"status": "ok"})
            if request.path == "/v1/models":
                return _json_answer(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
            return _json_answer(404, {"error": {"message": "no such route", "type": "NotFoundError"}})
        mode = request.mode or ""
        answer = _MODES.get(mode)
        if answer is not None:
            return answer(self, request)
        usage = _lying_usage(mode)
        if usage is None:
            message = f"hostile worker: unknown mode {mode!r}"
            return _json_answer(400, {"error": {"message": message, "type": "BadRequestError", "code": 400}})
        return self._success(request, usage)

    def _success(self, request: Received, usage: dict[str, Any]) -> bytes:
        model = MODEL
        with contextlib.suppress(ValueError, AttributeError):
            model = str(json.loads(request.body).get("model") or MODEL)
        if request.streams:
            return _chunked_stream(_stream_events(model, usage))
        return _json_answer(200, _completion(model, usage))


async def _read_request(reader: asyncio.StreamReader) -> Received | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None  # a connection opened and closed without a request (a pool's probe)
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            parts.append((await reader.readexactly(size + 2))[:size])
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass
                break
        body = b"".join(parts)
    else:
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Received(method, target.split("?", 1)[0], headers, body)


def _redirect(worker: HostileWorker, request: Received) -> bytes:
    # To the same server, same port: a gateway that follows it is counted at REDIRECT_PATH.
    host = request.headers.get("host", worker.url.removeprefix("http://"))
    headers = [
        ("location", f"http://{host}{REDIRECT_PATH}"),
        ("content-length", "0"),
        ("connection", "close"),
    ]
    return _head(302, headers)


def _error(status: int, error: object) -> Callable[[HostileWorker, Received], bytes]:
    return lambda worker, request: _json_answer(status, {"error": error})


_MODES: dict[str, Callable[[HostileWorker, Received], bytes]] = {
    "ok": lambda worker, request: worker._success(request, dict(HONEST_USAGE)),
    "bad-status-line": lambda worker, request: b"HTTP/1.1 abc\r\n\r\n",
    "huge-header": lambda worker, request: (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-huge: "
        + b"a" * (64 * 1024)
        + b"\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"
    ),
    "bad-content-length": lambda worker, request: (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: abc\r\n"
        b"connection: close\r\n\r\n{}"
    ),
    "not-http": lambda worker, request: _NOT_HTTP,
    "redirect": _redirect,
    "error-string": _error(418, "teapot"),
    "error-int-code": _error(400, {"message": "bad thing", "type": "BadRequestError", "code": 400}),
    "html-400": lambda worker, request: _html_answer(400),
    "html-502": lambda worker, request: _html_answer(502),
    "huge-error": _error(
        400, {"message": "x" * (1024 * 1024), "type": "BadRequestError", "param": None, "code": 400}
    ),
    "hold-candidates": _holding_stream("candidates"),
    "hold-calls": _holding_stream("calls"),
    "hold-arguments": _holding_stream("arguments"),
}
MODES = tuple(_MODES) + tuple(f"{p}usage-{lie}" for p in ("", "stream-") for lie in USAGE_LIES)


@contextlib.contextmanager
def run_hostile(ports: int = 1) -> Iterator[HostileWorker]:
    """A hostile worker on `ports` loopback ports, stopped (connections closed) on exit."""
    worker = HostileWorker(ports)
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()
