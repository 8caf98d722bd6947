"""Lua scripts live in gateway/redis/lua/*.lua and run by SHA, loaded again on NOSCRIPT."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any

import hiredis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError
from redis.typing import EncodableT

from gateway.redis.client import RedisClient, lean_connections


class Script:
    """One script, called as redis-py's `AsyncScript` is: `await script(keys=..., args=...)`.

    On one Redis (plain, TLS, unix or Sentinel's master) the EVALSHA goes on the client's lean
    connections (gateway/redis/lean.py): redis-py's layers around one command, its StreamReader
    and its parser's read loop cost about as much again as the rest of the call, and admission
    and settlement make one call each per request. NOSCRIPT, and every call on a cluster, go
    through redis-py's script, which loads the script again or routes by slot."""

    def __init__(self, redis: RedisClient, source: str) -> None:
        self._redis = redis
        self._registered: AsyncScript = redis.register_script(source)
        self.sha: str = self._registered.sha
        self.script = source  # named as redis-py's: what SCRIPT LOAD sends
        self._lean = lean_connections(redis)

    async def __call__(self, keys: Sequence[str] = (), args: Iterable[EncodableT] = ()) -> Any:
        lean = self._lean
        if lean is None:
            return await self._registered(keys=keys, args=args)
        command: tuple[Any, ...] = ("EVALSHA", self.sha, len(keys), *keys, *args)
        try:
            return await lean.call(hiredis.pack_command(command))
        except NoScriptError:
            pass
        return await self._registered(keys=keys, args=args)  # SCRIPT LOAD, then EVALSHA

    async def run_batch(self, calls: Sequence[tuple[Sequence[str], Sequence[EncodableT]]]) -> None:
        """Runs the script once per (keys, args) in one pipeline, not a transaction: one round trip
        (on a cluster, one per node at once), with no SCRIPT EXISTS first. A Redis that lost the
        script (a restart, a failover, SCRIPT FLUSH) answers NOSCRIPT: it is loaded and the whole
        batch sent again, so every script run this way must be safe to run twice. The first error
        left is raised. Each EVALSHA goes through `execute_command`, because redis-py's cluster
        pipeline refuses its own `evalsha()`, though it routes the raw command by its keys (one
        slot per script, gateway/redis/keys.py) like any other."""
        for attempt in range(2):
            async with self._redis.pipeline(transaction=False) as pipe:
                for keys, args in calls:
                    pipe.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
                results = await pipe.execute(raise_on_error=False)
            if attempt or not any(isinstance(result, NoScriptError) for result in results):
                for result in results:
                    if isinstance(result, Exception):
                        raise result
                return
            await self._redis.script_load(self.script)


def load_script(redis: RedisClient, name: str) -> Script:
    source = resources.files("gateway.redis.lua").joinpath(f"{name}.lua").read_text(encoding="utf-8")
    return Script(redis, source)
