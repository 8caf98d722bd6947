"""Redis commands per request: INFO commandstats diffed over a phase, split into the commands the
gateway sends and those its Lua scripts run inside Redis (commandstats counts both)."""

from __future__ import annotations

import re
from functools import cache

import redis.asyncio

from harness.cpu import REPO

# What the benchmark itself sends (one INFO before and after each counted phase).
OWN_COMMANDS = frozenset({"info"})
_LUA_CALL = re.compile(r"""redis\.p?call\(\s*["']([A-Za-z]+)["']""")


class CommandStats:
    """Reads Redis's per-command call counts; an awaitable `Load.redis_counter`."""

    def __init__(self, url: str) -> None:
        self._client = redis.asyncio.Redis.from_url(url)

    async def __call__(self) -> dict[str, int]:
        stats = await self._client.info("commandstats")
        return {
            name.removeprefix("cmdstat_"): int(entry["calls"])
            for name, entry in stats.items()
            if name.startswith("cmdstat_") and name.removeprefix("cmdstat_") not in OWN_COMMANDS
        }

    async def aclose(self) -> None:
        await self._client.aclose()


@cache
def lua_commands() -> frozenset[str]:
    """The commands the gateway's Lua scripts call (wherever under gateway/ they live), lower case."""
    names: set[str] = set()
    for path in (REPO / "gateway").rglob("*.lua"):
        names.update(m.lower() for m in _LUA_CALL.findall(path.read_text(encoding="utf-8")))
    return frozenset(names)


def split(calls: dict[str, int], requests: int) -> tuple[dict[str, float], dict[str, float]]:
    """(commands sent by the gateway, commands run inside Lua scripts), each per request, most first.
    A command that appears in a script counts as run inside one."""
    if not requests:
        return {}, {}
    inside = lua_commands()
    ranked = sorted(calls.items(), key=lambda kv: (-kv[1], kv[0]))
    sent = {name: n / requests for name, n in ranked if name not in inside}
    run_in_lua = {name: n / requests for name, n in ranked if name in inside}
    return sent, run_in_lua


def describe(calls: dict[str, int], requests: int) -> str:
    sent, run_in_lua = split(calls, requests)

    def fmt(part: dict[str, float]) -> str:
        return ", ".join(f"{name} {per:.3f}" for name, per in part.items()) or "none"

    return f"sent: {fmt(sent)}; inside Lua scripts: {fmt(run_in_lua)}"
