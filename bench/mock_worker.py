"""A fast mock OpenAI worker for benchmarks: raw asyncio.Protocol, HTTP/1.1 keep-alive, canned answers.

It answers `POST /v1/chat/completions` (and `/v1/completions`) the way vLLM frames its answers:

* non-stream: a small `chat.completion` JSON with usage, sent with a Content-Length;
* stream: `Transfer-Encoding: chunked` SSE, one chunked frame per event -- a role chunk, N content
  deltas (the last one carrying `finish_reason`), a usage chunk with `"choices":[]` when the request
  asked for `stream_options.include_usage`, then `data: [DONE]`. Each event is its own write, so the
  gateway sees many small chunks; `--token-delay-ms` paces the content deltas like a real engine,
  and `--first-token-delay-ms` adds a "prefill" pause before the first content delta and the same
  pause after it, so that a client sharing this worker's CPU receives the first token on its own
  (for time-to-first-token measurements; the rest of the stream then follows at `--token-delay-ms`).
  `--prefill-ms` sets the pause before the first content delta alone (0: none, so a proxy's work on
  the response head is on the time-to-first-token path too).

Everything is pre-rendered at start, and a request body is parsed only as far as the answer needs
(Content-Length, and whether `"stream":true` / `"include_usage":true` appear in it), so the mock costs
a few tens of microseconds per request and never becomes the bottleneck of a gateway benchmark.

    python bench/mock_worker.py --port 0 --tokens 64     # prints "READY <port>" once listening
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import signal
import socket
import sys
import time
from typing import cast

_STREAM_RE = re.compile(rb'"stream"\s*:\s*true')
_USAGE_RE = re.compile(rb'"include_usage"\s*:\s*true')
_MAX_HEAD = 64 * 1024
_MAX_BODY = 16 * 1024 * 1024
MODEL = "bench-model"
PROMPT_TOKENS = 12


def _event(payload: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Canned:
    """Every byte the worker sends, rendered once."""

    def __init__(self, tokens: int, model: str = MODEL, whole_bytes: int = 0) -> None:
        """`whole_bytes`: pad a whole answer's text to about that many bytes (0: a short answer)."""
        self.tokens = tokens
        created = int(time.time())
        rid = "chatcmpl-bench0000000000000000000000000"
        usage = {
            "prompt_tokens": PROMPT_TOKENS,
            "total_tokens": PROMPT_TOKENS + tokens,
            "completion_tokens": tokens,
        }
        completion = {
            "id": rid,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "x" * whole_bytes or "Hello from the mock worker.",
                    },
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
        }
        body = json.dumps(completion, separators=(",", ":")).encode()
        self.whole = (
            b"HTTP/1.1 200 OK\r\nserver: mock-worker\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body)
        )
        self.stream_head = (
            b"HTTP/1.1 200 OK\r\nserver: mock-worker\r\n"
            b"content-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model}

        def choice(delta: dict[str, str], finish: str | None) -> dict[str, object]:
            return {
                **base,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            }

        self.role = _chunked(_event(choice({"role": "assistant", "content": ""}, None)))
        self.contents = [
            _chunked(_event(choice({"content": f" tok{i}"}, "length" if i == tokens - 1 else None)))
            for i in range(tokens)
        ]
        self.usage = _chunked(_event({**base, "choices": [], "usage": usage}))
        self.done = _chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        self.not_found = _plain(404, b'{"error":{"message":"not found","type":"not_found"}}')
        self.bad_request = _plain(400, b'{"error":{"message":"bad request","type":"invalid_request"}}')


def _plain(status: int, body: bytes) -> bytes:
    reason = {400: b"Bad Request", 404: b"Not Found"}[status]
    return b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        status,
        reason,
        len(body),
        body,
    )


class WorkerProtocol(asyncio.Protocol):
    """One connection: parses pipelined requests in order; a paced stream holds the next one back."""

    def __init__(
        self,
        canned: Canned,
        token_delay_s: float,
        first_token_delay_s: float = 0.0,
        prefill_s: float | None = None,
    ) -> None:
        self._canned = canned
        self._delay = token_delay_s
        self._first_delay = first_token_delay_s
        self._prefill = prefill_s
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._busy = False
        self._close_after = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, so no isinstance check here.
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if not self._busy:
            self._process()

    def _process(self) -> None:
        buffer = self._buffer
        while self._transport is not None and not self._busy:
            head_end = buffer.find(b"\r\n\r\n")
            if head_end < 0:
                if len(buffer) > _MAX_HEAD:
                    self._fail(self._canned.bad_request)
                return
            head = bytes(buffer[:head_end]).lower()
            length = 0
            at = head.find(b"\r\ncontent-length:")
            if at >= 0:
                line_end = head.find(b"\r\n", at + 2)
                raw = head[at + 17 : line_end if line_end >= 0 else len(head)].strip()
                if not raw.isdigit() or int(raw) > _MAX_BODY:
                    self._fail(self._canned.bad_request)
                    return
                length = int(raw)
            body_start = head_end + 4
            if len(buffer) < body_start + length:
                return
            body = bytes(buffer[body_start : body_start + length])
            del buffer[: body_start + length]
            self._close_after = b"\r\nconnection: close" in head
            method, _, rest = head.partition(b" ")
            path = rest.partition(b" ")[0]
            self._answer(method, path, body)

    def _answer(self, method: bytes, path: bytes, body: bytes) -> None:
        transport = self._transport
        assert transport is not None
        canned = self._canned
        if method != b"post" or path not in (b"/v1/chat/completions", b"/v1/completions"):
            transport.write(canned.not_found)
        elif _STREAM_RE.search(body) is None:
            transport.write(canned.whole)
        else:
            with_usage = _USAGE_RE.search(body) is not None
            if self._delay > 0 or self._first_delay > 0:
                self._busy = True
                asyncio.get_running_loop().create_task(self._paced_stream(with_usage))
                return
            write = transport.write
            write(canned.stream_head)
            write(canned.role)
            for frame in canned.contents:
                write(frame)
            if with_usage:
                write(canned.usage)
            write(canned.done)
        if self._close_after:
            transport.close()
            self._transport = None

    async def _paced_stream(self, with_usage: bool) -> None:
        canned = self._canned
        frames = [canned.stream_head, canned.role, *canned.contents]
        if with_usage:
            frames.append(canned.usage)
        frames.append(canned.done)
        last_content = len(canned.contents) + 1
        try:
            for i, frame in enumerate(frames):
                pause = self._delay if 2 <= i <= last_content else 0.0
                if i in (2, 3) and self._first_delay > 0:
                    pause = self._first_delay
                if i == 2 and self._prefill is not None:
                    pause = self._prefill
                if pause > 0:
                    await asyncio.sleep(pause)
                transport = self._transport
                if transport is None:
                    return  # the client hung up: stop "generating", as vLLM does
                transport.write(frame)
            if self._close_after and self._transport is not None:
                self._transport.close()
                self._transport = None
        finally:
            self._busy = False
        if self._buffer:
            self._process()

    def _fail(self, answer: bytes) -> None:
        if self._transport is not None:
            self._transport.write(answer)
            self._transport.close()
            self._transport = None


async def serve(
    host: str,
    port: int,
    tokens: int,
    token_delay_ms: float,
    first_token_delay_ms: float,
    prefill_ms: float | None = None,
    whole_bytes: int = 0,
) -> None:
    loop = asyncio.get_running_loop()
    canned = Canned(tokens, whole_bytes=whole_bytes)
    delay = token_delay_ms / 1000.0
    first_delay = first_token_delay_ms / 1000.0
    prefill = None if prefill_ms is None else prefill_ms / 1000.0
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = await loop.create_server(
        lambda: WorkerProtocol(canned, delay, first_delay, prefill), sock=sock, backlog=1024
    )
    bound = server.sockets[0].getsockname()[1]
    print(f"READY {bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed as READY <port>)")
    parser.add_argument("--tokens", type=int, default=64, help="content deltas per streamed answer")
    parser.add_argument("--token-delay-ms", type=float, default=0.0, help="pause before each content delta")
    parser.add_argument(
        "--first-token-delay-ms",
        type=float,
        default=0.0,
        help="pause before the first content delta and again after it (a time-to-first-token worker)",
    )
    parser.add_argument(
        "--prefill-ms",
        type=float,
        default=None,
        help="pause before the first content delta only, overriding the two above for it (0: the first "
        "token follows the role chunk at once)",
    )
    parser.add_argument(
        "--whole-bytes",
        type=int,
        default=0,
        help="pad every whole (non-stream) answer's text to this many bytes (bench/answer_memory_bench.py)",
    )
    args = parser.parse_args(argv)
    if args.tokens < 1:
        parser.error("--tokens must be at least 1")
    if min(args.token_delay_ms, args.first_token_delay_ms, args.prefill_ms or 0.0) < 0:
        parser.error("delays must not be negative")
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a gateway dependency on Linux
        runner = asyncio.run
    else:
        runner = uvloop.run
    with contextlib.suppress(KeyboardInterrupt):
        runner(
            serve(
                args.host,
                args.port,
                args.tokens,
                args.token_delay_ms,
                args.first_token_delay_ms,
                args.prefill_ms,
                args.whole_bytes,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
