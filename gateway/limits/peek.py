"""What remains of limits right now, read without charging anything: one call of the read-only
gateway/redis/lua/peek.lua over the same Redis keys admission charges (gateway/limits/admission.py),
so what it reports is what the next admission would see."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.errors import StoreUnavailable
from gateway.limits.admission import Limit, LimitKind


class PeekStore(Protocol):
    """peek.lua's reply for `limit_keys` (gateway/limits/limit_store.py); raises StoreUnavailable."""

    async def peek(self, limit_keys: list[str], args: Sequence[Any]) -> list[Any]: ...


@dataclass(frozen=True, slots=True)
class Remaining:
    limit: Limit
    remaining: int  # requests or tokens left now, or free concurrency slots
    in_use: int  # concurrency: requests in flight; budget: tokens spent this period; else 0
    reset_after_s: float  # until a per-minute limit is whole again, or a budget's period ends


class LimitReader:
    def __init__(self, store: PeekStore) -> None:
        self._store = store

    async def remaining(self, limits: Sequence[Limit]) -> list[Remaining]:
        """One round trip for all of `limits` (all of one team: they share its hash tag)."""
        if not limits:
            return []
        args: list[str | int | float] = []
        for limit in limits:
            if limit.kind is LimitKind.CONCURRENCY:
                args += ("c", limit.amount, 0)
            elif limit.kind is LimitKind.BUDGET or limit.kind is LimitKind.MONEY:
                args += ("b", limit.amount, limit.period_s)
            else:
                args += ("g", limit.amount, limit.period_s)
        try:
            reply = await self._store.peek([limit.redis_key for limit in limits], args)
        except StoreUnavailable as exc:
            raise StoreUnavailable(
                exc.reason, "The rate limiter is unavailable; try again shortly."
            ) from None
        return [
            Remaining(limit, int(reply[i * 3]), int(reply[i * 3 + 1]), float(reply[i * 3 + 2]))
            for i, limit in enumerate(limits)
        ]
