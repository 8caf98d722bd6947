"""Request-rate admission: GCRA in one Lua script (gateway/lua/gcra.lua), one Redis round trip.

A limit of N per period allows a burst of N and then one request per period/N, the smooth
equivalent of a sliding window: with rpm=5 the sixth request within a minute is refused.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.errors import ErrorCode, GatewayError
from gateway.scripts import load_script


@dataclass(frozen=True, slots=True)
class Limit:
    redis_key: str
    rate: int
    period_s: float
    description: str  # says which limit refused, e.g. "key key_ab12 requests per minute"

    @property
    def burst(self) -> int:
        return self.rate


@dataclass(frozen=True, slots=True)
class LimitState:
    limit: Limit
    remaining: int
    reset_after_s: float
    retry_after_s: float


@dataclass(frozen=True, slots=True)
class Admission:
    allowed: bool
    states: tuple[LimitState, ...]
    denied_by: LimitState | None

    def request_headers(self) -> dict[str, str]:
        """OpenAI's x-ratelimit-*-requests headers, from the tightest limit."""
        if not self.states:
            return {}
        tightest = self.denied_by or min(self.states, key=lambda s: s.remaining)
        return {
            "x-ratelimit-limit-requests": str(tightest.limit.rate),
            "x-ratelimit-remaining-requests": str(max(tightest.remaining, 0)),
            "x-ratelimit-reset-requests": _duration(tightest.reset_after_s),
        }

    def error(self) -> GatewayError:
        assert self.denied_by is not None
        retry_after = max(1, math.ceil(self.denied_by.retry_after_s))
        return GatewayError(
            ErrorCode.RATE_LIMIT_EXCEEDED,
            f"Rate limit reached: {self.denied_by.limit.description} "
            f"(limit {self.denied_by.limit.rate}). Retry after {retry_after} s.",
            headers={"retry-after": str(retry_after), **self.request_headers()},
        )


ADMIT_ALL = Admission(allowed=True, states=(), denied_by=None)


def _duration(seconds: float) -> str:
    """OpenAI writes reset times as durations such as '1s', '6m0s' or '20ms'."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    whole = math.ceil(seconds)
    minutes, secs = divmod(whole, 60)
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


class RateLimiter:
    def __init__(self, redis: Redis, *, timeout_s: float) -> None:
        self._script = load_script(redis, "gcra")
        self._timeout_s = timeout_s

    async def admit(self, limits: Sequence[Limit], cost: int = 1) -> Admission:
        if not limits:
            return ADMIT_ALL
        args: list[float | int] = [cost]
        for limit in limits:
            args.extend((limit.burst, limit.rate, limit.period_s))
        try:
            async with asyncio.timeout(self._timeout_s):
                reply = await self._script(keys=[limit.redis_key for limit in limits], args=args)
        except (RedisError, TimeoutError):
            raise GatewayError(
                ErrorCode.REDIS_UNAVAILABLE, "The rate limiter is unavailable; try again shortly."
            ) from None
        states = tuple(
            LimitState(
                limit=limit,
                remaining=int(reply[2 + i * 3]),
                reset_after_s=float(reply[3 + i * 3]),
                retry_after_s=float(reply[4 + i * 3]),
            )
            for i, limit in enumerate(limits)
        )
        denied_index = int(reply[1])
        return Admission(
            allowed=bool(int(reply[0])),
            states=states,
            denied_by=states[denied_index - 1] if denied_index else None,
        )
