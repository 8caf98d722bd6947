"""A bare pass-through proxy: the control the gateway benchmark compares the gateway with.

Starlette + aiohttp under uvicorn with the gateway's settings (uvloop, httptools, log level warning,
no access log). `POST /v1/chat/completions` reads the body, posts it to one upstream URL over one
shared aiohttp session (the gateway's connector settings) and streams the answer back chunk by chunk
as it arrives, with the upstream's status and content-type. Nothing else: no auth, Redis, routing,
parsing or metering.

`--redis-url` adds the least a gateway that admits and meters through Redis must do: one round trip
per request before the upstream call (an INCR, for admission) and one after the answer's last byte
has gone to the client (an INCRBY of the bytes relayed, for metering; it does not hold the answer
up), on a minimal protocol of its own: no script, no client library, one reply line read. A
benchmark can so tell what those round trips cost on its machine from what the gateway adds beyond
them.

    python bench/bare_proxy.py --port 0 --upstream http://127.0.0.1:8001   # prints "READY <port>"
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import urlsplit

import aiohttp
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send


class _RoundTrip(asyncio.Protocol):
    """One Redis connection: one command at a time, its one-line reply handed to the waiting call."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[bytes] | None = None
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.buffer.endswith(b"\r\n") and self.waiter is not None:
            self.waiter.set_result(self.buffer)
            self.buffer, self.waiter = b"", None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("Redis closed the connection"))

    async def call(self, packed: bytes) -> bytes:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(packed)
        return await self.waiter


def pack(*words: bytes) -> bytes:
    """A command in Redis's protocol (RESP): an array of bulk strings."""
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)


ADMIT = pack(b"INCR", b"sluicegate-bench-admitted")


def settle_command(relayed: int) -> bytes:
    return pack(b"INCRBY", b"sluicegate-bench-relayed", str(relayed).encode())


def round_trips(redis_url: str) -> Callable[[bytes], Awaitable[None]]:
    """One command's round trip per call (an integer reply), on idle connections kept for reuse
    (one per concurrent call)."""
    parts = urlsplit(redis_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    idle: list[_RoundTrip] = []

    async def call(command: bytes) -> None:
        if idle:
            conn = idle.pop()
        else:
            loop = asyncio.get_running_loop()
            _, conn = await loop.create_connection(_RoundTrip, host, port)
        reply = await conn.call(command)
        if not reply.startswith(b":"):
            raise RuntimeError(f"Redis answered {reply[:80]!r}")
        idle.append(conn)

    return call


def make_app(upstream: str, redis_url: str | None = None) -> Starlette:
    url = upstream.rstrip("/") + "/v1/chat/completions"
    sessions: list[aiohttp.ClientSession] = []
    redis = round_trips(redis_url) if redis_url else None

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=10, keepalive_timeout=30)
        async with aiohttp.ClientSession(
            connector=connector, auto_decompress=False, skip_auto_headers=("User-Agent", "Accept-Encoding")
        ) as session:
            sessions.append(session)
            yield

    async def chat(request: Request) -> Relay:
        headers = {"content-type": request.headers.get("content-type", "application/json")}
        if redis is not None:
            await redis(ADMIT)
        return Relay(await sessions[0].post(url, data=await request.body(), headers=headers), redis)

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])], lifespan=lifespan)


class Relay:
    """A raw ASGI response: the upstream's status and content-type, then its body chunk by chunk."""

    def __init__(
        self, response: aiohttp.ClientResponse, redis: Callable[[bytes], Awaitable[None]] | None
    ) -> None:
        self.response = response
        self.redis = redis

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        upstream = self.response
        try:
            content_type = upstream.headers.get("content-type", "application/octet-stream").encode()
            headers = [(b"content-type", content_type)]
            await send({"type": "http.response.start", "status": upstream.status, "headers": headers})
            relayed = 0
            async for chunk in upstream.content.iter_any():
                relayed += len(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            upstream.release()
        if self.redis is not None:
            await self.redis(settle_command(relayed))


class Server(uvicorn.Server):
    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            print(f"READY {self.servers[0].sockets[0].getsockname()[1]}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed as READY <port>)")
    parser.add_argument("--upstream", required=True, help="the worker's base URL, e.g. http://127.0.0.1:8001")
    parser.add_argument("--redis-url", help="one INCR round trip to this Redis before each upstream call")
    args = parser.parse_args()
    config = uvicorn.Config(
        make_app(args.upstream, args.redis_url), host=args.host, port=args.port, loop="uvloop",
        http="httptools", log_level="warning", access_log=False,
    )  # fmt: skip
    Server(config).run()


if __name__ == "__main__":
    main()
