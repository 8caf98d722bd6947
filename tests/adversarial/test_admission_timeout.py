"""An admission that Redis carried out but whose reply came too late: the client is told 503
`redis_unavailable`, yet admit.lua has already taken a concurrency slot and charged the token
reservation against the team's budget. No Settlement was opened for it (the pipeline only opens
one for an admission it saw), so nothing ever gives them back: the slot stays for its whole
lease, the budget reservation stays spent for the day.

Redis is reached through a loopback proxy that forwards everything but, once armed, swallows the
reply to the admit.lua call (after Redis has run it); the gateway's own redis timeout does the
rest. Whether the script ran is proven by the proxy having seen Redis's reply."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import threading
from collections.abc import Iterator
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

import redis

from tests.adversarial.scripted import MODEL, ScriptedWorker, run_scripted, table
from tests.conftest import GatewayFactory
from tests.http import post
from tests.pipeline.support import CHAT, DEADLINE_S, envelope
from tests.servers import listening_socket
from tests.waiting import wait_until

ADMIT_SOURCE = resources.files("gateway.redis.lua").joinpath("admit.lua").read_bytes()
ADMIT_SHA = hashlib.sha1(ADMIT_SOURCE).hexdigest().encode()  # noqa: S324 -- Redis names scripts so


class SwallowingProxy:
    def __init__(self, redis_url: str) -> None:
        parts = urlsplit(redis_url)
        assert parts.hostname is not None
        assert parts.port is not None
        self._target = (parts.hostname, parts.port)
        self._sock = listening_socket()
        self.url = f"redis://127.0.0.1:{self._sock.getsockname()[1]}"
        self.armed = threading.Event()
        self.swallowed = threading.Event()
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._connection, sock=self._sock)
        self._ready.set()
        await self._stop.wait()
        server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        held = asyncio.Event()
        up_reader, up_writer = await asyncio.open_connection(*self._target)

        async def upward() -> None:
            while data := await reader.read(65536):
                if self.armed.is_set() and ADMIT_SHA in data.lower():
                    self.armed.clear()
                    held.set()
                up_writer.write(data)
                await up_writer.drain()

        async def downward() -> None:
            while data := await up_reader.read(65536):
                if held.is_set():
                    if data.startswith(b"*"):  # admit.lua's array: the script ran
                        self.swallowed.set()
                    continue  # the reply never reaches the gateway
                writer.write(data)
                await writer.drain()

        try:
            pumps = [asyncio.ensure_future(upward()), asyncio.ensure_future(downward())]
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
        finally:
            self._tasks.discard(task)
            for w in (writer, up_writer):
                w.close()
                with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                    await w.wait_closed()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError("the redis proxy did not start")

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)
        self._sock.close()


@contextlib.contextmanager
def swallowing_proxy(redis_url: str) -> Iterator[SwallowingProxy]:
    proxy = SwallowingProxy(redis_url)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


async def _never_called(worker: ScriptedWorker, request: Any, reader: Any, writer: Any) -> None:
    raise AssertionError("the request reached the worker")


def _charged(redis_client: redis.Redis, team: str) -> tuple[int, int]:
    """(concurrency slots held, budget tokens spent) for the team's keys."""
    slots = sum(
        int(redis_client.zcard(k)) for k in redis_client.scan_iter(match=f"sg:{{t:{team}}}:rl:*:conc")
    )
    spent = sum(
        int(redis_client.get(k) or 0) for k in redis_client.scan_iter(match=f"sg:{{t:{team}}}:rl:budget:d:*")
    )
    return slots, spent


def test_an_admission_whose_reply_timed_out_leaves_nothing_charged(
    make_gateway: GatewayFactory, redis_server: Any, redis_client: redis.Redis
) -> None:
    with (
        swallowing_proxy(redis_server.url) as proxy,
        run_scripted(_never_called) as worker,
        make_gateway(table(worker.url), redis_url=proxy.url, redis_timeout_s=0.5) as gw,
    ):
        team = "team-" + secrets.token_hex(4)
        gw.admin.call("POST", "/admin/v1/teams", {"name": team, "daily_tokens": 1_000_000})
        key = gw.new_key(team, max_concurrency=1)["key"]
        redis_client.script_load(ADMIT_SOURCE)  # so the armed call is the script running, not NOSCRIPT
        proxy.armed.set()
        reply = post(
            f"{gw.url}{CHAT}", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}, key=key
        )
        envelope(reply, 503, "redis_unavailable")
        assert proxy.swallowed.wait(DEADLINE_S), "Redis never ran the admission: the scenario did not happen"
        try:
            wait_until(lambda: _charged(redis_client, team) == (0, 0), DEADLINE_S, "nothing charged")
        except AssertionError:
            slots, spent = _charged(redis_client, team)
            raise AssertionError(
                "the client was refused with 503 redis_unavailable, but admit.lua had run: "
                f"{slots} concurrency slot(s) stay held (a key allowing 1 at a time is locked out for "
                f"its lease) and "
                f"{spent} budget tokens stay spent for a request that never ran"
            ) from None
