"""Lua scripts live in gateway/redis/lua/*.lua; redis-py's Script runs them by SHA and reloads on NOSCRIPT."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib import resources

from redis.commands.core import AsyncScript
from redis.typing import EncodableT

from gateway.redis.client import RedisClient, RedisPipeline


def load_script(redis: RedisClient, name: str) -> AsyncScript:
    source = resources.files("gateway.redis.lua").joinpath(f"{name}.lua").read_text(encoding="utf-8")
    return redis.register_script(source)


def queue_script(
    pipe: RedisPipeline, script: AsyncScript, keys: Sequence[str], args: Iterable[EncodableT]
) -> None:
    """Queues one EVALSHA of `script` on a pipeline (no SCRIPT EXISTS first: the caller loads
    the script and sends again on NOSCRIPT). Through `execute_command`, because redis-py's cluster
    pipeline refuses its own `evalsha()` method, though it routes the raw command by its keys (one
    slot per script, gateway/redis/keys.py) like any other; on one Redis the bytes are the same."""
    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
