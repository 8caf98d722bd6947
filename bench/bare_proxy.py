"""A bare pass-through proxy: the control the gateway benchmark compares the gateway with.

Starlette + aiohttp under uvicorn with the gateway's settings (uvloop, httptools, log level warning,
no access log). `POST /v1/chat/completions` reads the body, posts it to one upstream URL over one
shared aiohttp session (the gateway's connector settings) and streams the answer back chunk by chunk
as it arrives, with the upstream's status and content-type. Nothing else: no auth, Redis, routing,
parsing or metering.

    python bench/bare_proxy.py --port 0 --upstream http://127.0.0.1:8001   # prints "READY <port>"
"""

from __future__ import annotations

import argparse
import contextlib
import socket
from collections.abc import AsyncIterator

import aiohttp
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send


def make_app(upstream: str) -> Starlette:
    url = upstream.rstrip("/") + "/v1/chat/completions"
    sessions: list[aiohttp.ClientSession] = []

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
        return Relay(await sessions[0].post(url, data=await request.body(), headers=headers))

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])], lifespan=lifespan)


class Relay:
    """A raw ASGI response: the upstream's status and content-type, then its body chunk by chunk."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        upstream = self.response
        try:
            content_type = upstream.headers.get("content-type", "application/octet-stream").encode()
            headers = [(b"content-type", content_type)]
            await send({"type": "http.response.start", "status": upstream.status, "headers": headers})
            async for chunk in upstream.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            upstream.release()


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
    args = parser.parse_args()
    config = uvicorn.Config(
        make_app(args.upstream), host=args.host, port=args.port, loop="uvloop", http="httptools",
        log_level="warning", access_log=False,
    )  # fmt: skip
    Server(config).run()


if __name__ == "__main__":
    main()
