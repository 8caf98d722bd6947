"""Per team, key, model and UTC day usage in Redis: one script call per finished request.

    sg:{t:<team>}:usage:<YYYY-MM-DD>   HASH  "<key_id>|<model>|<counter>" -> integer
    sg:{t:<team>}:usage-days           SET   days that have usage
    sg:{t:<team>}:req:<request_id>     STR   marker that makes a retried write count once

Counters: requests, prompt_tokens, completion_tokens, errors, disconnects.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway import redis_keys
from gateway.scripts import load_script

log = logging.getLogger("sluicegate.metering")

_MARKER_TTL_S = 24 * 3600
_USAGE_TTL_S = 400 * 24 * 3600
COUNTERS = ("requests", "prompt_tokens", "completion_tokens", "errors", "disconnects")


@dataclass(frozen=True, slots=True)
class UsageRecord:
    request_id: str
    team: str
    key_id: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    error: bool
    disconnected: bool
    day: str

    @staticmethod
    def today() -> str:
        return dt.datetime.now(dt.UTC).date().isoformat()


class Meter:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._script = load_script(redis, "meter")

    async def record(self, usage: UsageRecord) -> bool:
        """True when written, False when this request id was already recorded."""
        written = await self._script(
            keys=[
                redis_keys.request_marker(usage.team, usage.request_id),
                redis_keys.usage_day(usage.team, usage.day),
                redis_keys.usage_days(usage.team),
            ],
            args=[
                _MARKER_TTL_S,
                _USAGE_TTL_S,
                usage.day,
                f"{usage.key_id}|{usage.model}",
                usage.prompt_tokens,
                usage.completion_tokens,
                int(usage.error),
                int(usage.disconnected),
            ],
        )
        return bool(written)

    async def try_record(self, usage: UsageRecord) -> bool:
        try:
            await self.record(usage)
        except RedisError as exc:
            log.warning(
                "usage not written request_id=%s team=%s error=%s",
                usage.request_id,
                usage.team,
                type(exc).__name__,
            )
            return False
        return True

    async def report(
        self, teams: list[str], since: dt.date | None, until: dt.date | None
    ) -> list[dict[str, object]]:
        """Rows per team, key, model and day, oldest first; since/until are inclusive."""
        rows: list[dict[str, object]] = []
        for team in teams:
            days = sorted(
                redis_keys.as_text(d) for d in await self._redis.smembers(redis_keys.usage_days(team))
            )
            days = [
                d
                for d in days
                if (since is None or d >= since.isoformat()) and (until is None or d <= until.isoformat())
            ]
            if not days:
                continue
            async with self._redis.pipeline(transaction=False) as pipe:
                for day in days:
                    pipe.hgetall(redis_keys.usage_day(team, day))
                hashes = await pipe.execute()
            for day, raw in zip(days, hashes, strict=True):
                rows.extend(_rows_of_day(team, day, raw))
        return rows


def _rows_of_day(team: str, day: str, raw: dict[bytes, bytes]) -> list[dict[str, object]]:
    grouped: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for field, value in raw.items():
        key_id, model, counter = field.decode().rsplit("|", 2)
        grouped[(key_id, model)][counter] = int(value)
    rows: list[dict[str, object]] = []
    for (key_id, model), counters in sorted(grouped.items()):
        row: dict[str, object] = {"team": team, "key_id": key_id, "model": model, "day": day}
        for name in COUNTERS:
            row[name] = counters.get(name, 0)
        row["total_tokens"] = counters.get("prompt_tokens", 0) + counters.get("completion_tokens", 0)
        rows.append(row)
    return rows
