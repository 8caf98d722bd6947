"""Lua scripts live in gateway/redis/lua/*.lua; redis-py's Script runs them by SHA and reloads on NOSCRIPT."""

from __future__ import annotations

from importlib import resources

from redis.asyncio import Redis
from redis.commands.core import AsyncScript


def load_script(redis: Redis, name: str) -> AsyncScript:
    source = resources.files("gateway.redis.lua").joinpath(f"{name}.lua").read_text(encoding="utf-8")
    return redis.register_script(source)
