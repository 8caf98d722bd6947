"""Admission's and settlement's script calls on connections read with hiredis directly.

Every request makes two script calls (admit.lua, settle.lua). Through redis-py's connection each
one passes its command layers, an asyncio StreamReader and the parser's read loop: about 113k
instructions per call, measured with callgrind (bench/README.md), against about 64k for the same
EVALSHA on a connection whose protocol hands each reply to the waiting call itself.

redis-py still opens every connection here (address, TLS, AUTH, database, Sentinel's master, its
handshake), then the transport is handed to `_Reply` (gateway/seams/redis_pool.py takes it): the
connection redis-py built is never used again. The rules are redis-py's pool's: one command per
connection at a time; a call cancelled or failed mid-flight closes its connection (its reply must
never reach the next caller); a connection Redis closed is retried once on a fresh one; past
`max_connections` of them (connecting ones included) a call fails at once. Errors are redis-py's
classes (NoScriptError, ResponseError, ConnectionError), so callers handle them as before. RESP3
push frames (redis-py's handshake asks for RESP3 and maintenance notices) are no call's reply and
are skipped, as redis-py's parser does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import hiredis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, MaxConnectionsError, ReadOnlyError

from gateway.seams.redis_pool import take_transport

# What hiredis returns while a reply is incomplete: its default, False, is also RESP3's `#f`.
_PENDING = object()
_PUSH: Any = getattr(hiredis, "PushNotification", ())  # hiredis >= 3.2; () matches nothing


class _Reply(asyncio.Protocol):
    """One connection: the call waiting on it, and the replies hiredis parses as bytes arrive."""

    def __init__(
        self,
        writer: asyncio.StreamWriter,
        reply_error: Callable[[str], Exception],
        lost: Callable[[_Reply], None],
    ) -> None:
        # Held as long as the connection: a StreamWriter collected while its transport is open
        # closes the transport (and warns).
        self._writer = writer
        self._lost = lost
        self.transport: Any = writer.transport
        self.reader = hiredis.Reader(
            protocolError=InvalidResponse, replyError=reply_error, notEnoughData=_PENDING
        )
        self.waiter: asyncio.Future[Any] | None = None
        self.closed = False

    async def call(self, packed: bytes) -> Any:
        if self.closed:
            raise RedisConnectionError("Connection closed by server.")
        waiter = asyncio.get_running_loop().create_future()
        self.waiter = waiter
        self.transport.write(packed)
        return await waiter

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while True:
            try:
                reply = self.reader.gets()
            except InvalidResponse as exc:
                self._fail(exc)
                return
            if reply is _PENDING:
                return  # not all of it yet
            if isinstance(reply, _PUSH):
                continue  # a push frame (a maintenance notice, say): no call's reply
            waiter, self.waiter = self.waiter, None
            if waiter is None:
                # A reply no call asked for (a second one to one command, or bytes sent unasked):
                # nothing more on this connection can be trusted.
                self.close()
                return
            if not waiter.done():  # a cancelled call closes the connection when it resumes
                waiter.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._lost(self)
        self._fail(RedisConnectionError("Connection closed by server."))

    def _fail(self, error: Exception) -> None:
        waiter, self.waiter = self.waiter, None
        self.close()
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.transport.close()


class LeanConnections:
    """The script calls' own connections, opened by `open_connection` (a redis-py pool's
    `make_connection`: the same URL, credentials and Sentinel lookup as every other call). Bounded
    on their own by `max_connections`, as the pool's connections are by theirs: the edge's
    descriptor budget counts both (gateway/edge/server.py)."""

    def __init__(
        self,
        open_connection: Callable[[], AbstractConnection],
        max_connections: int,
        *,
        follows_master: bool = False,
    ) -> None:
        self._open_connection = open_connection
        self._max = max_connections
        # Sentinel: a master that was failed over and came back as a replica answers a write
        # with READONLY.
        self._follows_master = follows_master
        self._idle: list[_Reply] = []
        self._open: set[_Reply] = set()
        self._connecting = 0

    async def call(self, packed: bytes) -> Any:
        """Sends one packed command and returns its reply (a ResponseError is raised)."""
        conn = self._take()
        if conn is None:
            conn = await self._connect()
        try:
            try:
                reply = await conn.call(packed)
                # A demoted master (Sentinel): a fresh connection asks where the master is now.
                stale = self._follows_master and isinstance(reply, ReadOnlyError)
            except RedisConnectionError:
                stale = True  # closed by Redis while it sat idle (a restart, its timeout)
            if stale:  # once more, on a fresh connection; once only, as redis-py's retry
                self._drop(conn)
                conn = await self._connect()
                reply = await conn.call(packed)
        except BaseException:
            self._drop(conn)  # cancelled or failed mid-flight: its reply may still come
            raise
        self._idle.append(conn)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def _take(self) -> _Reply | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        return None

    def _drop(self, conn: _Reply) -> None:
        conn.close()
        self._open.discard(conn)

    async def _connect(self) -> _Reply:
        # Connections still in their handshake count: a burst must not open one socket per call.
        if len(self._open) + self._connecting >= self._max:
            raise MaxConnectionsError("Too many connections")
        self._connecting += 1
        try:
            connection = self._open_connection()
            await connection.connect()  # type: ignore[no-untyped-call]
        finally:
            self._connecting -= 1
        # redis-py's connection ends here: its transport is this module's from now on.
        writer, parse_error = take_transport(connection)
        if writer is None:
            raise RedisConnectionError("Connection closed during its handshake.")
        conn = _Reply(writer, parse_error, self._open.discard)
        conn.transport.set_protocol(conn)
        if conn.transport.is_closing():
            conn.closed = True
            raise RedisConnectionError("Connection closed during its handshake.")
        self._open.add(conn)
        return conn

    def disconnect(self, inuse_connections: bool) -> None:
        """As the pool's own `disconnect`: every connection, or only those no call is using
        (Sentinel's pool asks for that when the master moved: a call in flight keeps its own)."""
        if inuse_connections:
            self.close()
            return
        idle, self._idle = self._idle, []
        for conn in idle:
            self._drop(conn)

    def close(self) -> None:
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()
