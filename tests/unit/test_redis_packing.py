"""The gateway packs Redis commands with hiredis (C) instead of redis-py's Python packer: the bytes
on the wire must be exactly what redis-py would send, for every kind of argument we use."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import Connection

from gateway.config import Settings
from gateway.redis.client import connect_redis

COMMANDS: list[tuple[Any, ...]] = [
    ("EVALSHA", "a" * 40, 2, "sg:{t:ml}:rl:key:k1:rpm", "sg:{t:ml}:rl:team:rpm", "req-1", "g", 60, 60.0, 1),
    ("SCRIPT LOAD", "return 1"),  # a two-word command name goes out as two arguments
    (b"CLIENT SETNAME", "gw"),
    ("HSET", "k", "f", "é ü", "n", -2, "x", 0.1, "big", 1e20, "raw", b"\x00\xff"),
    ("PING",),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: str(c[0]))
def test_hiredis_packing_sends_the_bytes_redis_py_would(command: tuple[Any, ...]) -> None:
    client = connect_redis(Settings(redis_url="redis://127.0.0.1:1/0"))
    assert isinstance(client, Redis)
    ours = client.connection_pool.make_connection()  # type: ignore[no-untyped-call]  # untyped in redis-py
    assert type(ours).__name__.startswith("Hiredis")
    expected = b"".join(Connection().pack_command(*command))
    assert b"".join(ours.pack_command(*command)) == expected
