"""The rate limiter: admits a request's limits (gateway/limits/admission.py) in one admit.lua call,
one Redis round trip, through its store (gateway/limits/limit_store.py); while Redis is away it
refuses (503) or, configured to fail open, admits without limits, and gives back what a script
whose reply was lost may have charged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from gateway.errors import ErrorCode, GatewayError, StoreUnavailable
from gateway.limits.admission import (
    CONCURRENCY_LEASE_S,
    Admission,
    Limit,
    LimitKind,
    LimitState,
    Reservation,
    money_costs,
    script_costs,
    unlimited,
)
from gateway.limits.leases import LeaseKeeper, RenewStore
from gateway.limits.spec import TokenCount
from gateway.metering.record import UsageRecord
from gateway.observability.metrics import Metrics

# The members as plain names, for the loop that runs per limit on every request (admission.py).
_REQUESTS, _TOKENS = LimitKind.REQUESTS, LimitKind.TOKENS
_CONCURRENCY, _BUDGET, _MONEY = LimitKind.CONCURRENCY, LimitKind.BUDGET, LimitKind.MONEY
_TOTAL, _INPUT = TokenCount.TOTAL, TokenCount.INPUT


class Compensator(Protocol):
    """Where an admission whose reply was lost goes to be undone (the meter's queue, which
    retries until Redis takes it)."""

    def submit(self, usage: UsageRecord) -> None: ...


class AdmitStore(RenewStore, Protocol):
    """Admission's store (gateway/limits/limit_store.py): admit.lua's reply in one round trip,
    bounded in time, the breaker told; raises StoreUnavailable. `available` is False while the
    breaker is open. It renews the concurrency slots admissions take."""

    @property
    def available(self) -> bool: ...

    async def admit(
        self, team: str, request_id: str, limit_keys: list[str], args: Sequence[Any]
    ) -> list[Any]: ...


class RateLimiter:
    def __init__(
        self,
        store: AdmitStore,
        metrics: Metrics,
        compensator: Compensator,
        *,
        fail_open: bool = False,
        lease_s: float = CONCURRENCY_LEASE_S,
    ) -> None:
        self.leases = LeaseKeeper(store, lease_s=lease_s)
        self._store = store
        self._compensator = compensator
        self._metrics = metrics
        self._fail_open = fail_open

    def _unavailable(self, reservation: Reservation) -> Admission:
        if self._fail_open:
            # Configured to serve rather than refuse while Redis is away: nothing was charged,
            # so nothing will be settled either.
            self._metrics.admitted_without_limits.inc()
            return unlimited(reservation)
        raise GatewayError(ErrorCode.REDIS_UNAVAILABLE, "The rate limiter is unavailable; try again shortly.")

    def _void(self, team: str, limits: Sequence[Limit], request_id: str, prompt: int) -> None:
        """The script may have run and charged everything even though its reply never came: a
        void settlement gives it all back once Redis answers again, if (and only if) the
        admission marker says it was charged. The marker holds the output granted, which this
        side never learnt: settle.lua adds it where a limit counts output (the ":1")."""
        settlements: list[tuple[str, str, str]] = []
        for limit, (fixed, per_output) in zip(limits, script_costs(limits, prompt), strict=True):
            if limit.kind is _CONCURRENCY:
                settlements.append((limit.redis_key, limit.kind.script_kind, request_id))
            elif limit.kind in (_TOKENS, _BUDGET, _MONEY):
                back = f"{fixed}:1" if per_output else str(fixed)
                if per_output > 1:  # money: each output token granted gives back its price
                    back += f":{per_output}"
                if limit.kind is _TOKENS:
                    back = f"{limit.period_s / limit.amount!r}:{back}"
                settlements.append((limit.redis_key, limit.kind.script_kind, back))
        self._compensator.submit(
            UsageRecord(
                request_id=request_id,
                team=team,
                key_id="",
                model="",
                prompt_tokens=0,
                completion_tokens=0,
                error=False,
                disconnected=False,
                day=UsageRecord.today(),
                settlements=tuple(settlements),
                void=True,
            )
        )

    async def admit(
        self,
        team: str,
        limits: Sequence[Limit],
        request_id: str,
        reservation: Reservation,
        *,
        least: int | None = None,
        step: int = 1,
    ) -> Admission:
        """Admits with the largest output from `least` (default: all asked) up to the
        reservation's, in multiples of `step` (the answers asked for, each with its own cap)."""
        if not limits:
            return unlimited(reservation)
        asked = reservation.completion_tokens
        least = asked if least is None else min(least, asked)
        prompt = reservation.prompt_tokens
        lease = self.leases.lease_s
        # One string for every limit, not four arguments each: redis-py and hiredis format each
        # argument of a command on its own, which for ~50 of them cost more than the rest of the
        # admission. admit.lua reads the words back with tonumber(); a whole lease goes as an int.
        slot = f" {int(lease) if lease == int(lease) else lease} 1 "
        words: list[str] = []
        for limit in limits:
            kind = limit.kind
            if kind is _CONCURRENCY:
                words.append(f"c {limit.amount}{slot}")
            elif kind is _REQUESTS:
                words.append(f"g {limit.amount} {limit.period_s} 1 ")
            elif kind is _TOKENS:
                counts = limit.counts
                cost = "t" if counts is _TOTAL else "i" if counts is _INPUT else "o"
                words.append(f"g {limit.amount} {limit.period_s} {cost} ")
            elif kind is _BUDGET:  # a budget counts every token
                words.append(f"b {limit.amount} {limit.period_s} t ")
            else:  # money: the prompt's price, and each output token's (plans.py sets a price)
                fixed, per_output = money_costs(limit.price, prompt) if limit.price else (0, 0)
                words.append(f"b {limit.amount} {limit.period_s} ${fixed}x{per_output} ")
        args = (request_id, asked, least, max(1, step), prompt, "".join(words))
        store = self._store
        if not store.available:
            # A call moments ago failed: do not wait out another timeout.
            return self._unavailable(reservation)
        try:
            # A comprehension, not a generator unpacked: one call, not one resumption a limit.
            reply = await store.admit(team, request_id, [limit.redis_key for limit in limits], args)
        except StoreUnavailable:
            self._void(team, limits, request_id, prompt)
            return self._unavailable(reservation)
        except asyncio.CancelledError:
            # Cut (the gateway shutting down) while the script ran: no settlement will follow, so
            # what it may have charged is given back the same way.
            self._void(team, limits, request_id, prompt)
            raise
        states = tuple(
            [
                LimitState(limit, int(reply[4 + i * 3]), float(reply[5 + i * 3]), float(reply[6 + i * 3]))
                for i, limit in enumerate(limits)
            ]
        )
        allowed, denied_index, bounded_index = bool(int(reply[0])), int(reply[1]), int(reply[3])
        slots = [(limit.redis_key, request_id) for limit in limits if limit.kind is _CONCURRENCY]
        return Admission(
            allowed=allowed,
            states=states,
            denied_by=states[denied_index - 1] if denied_index else None,
            request_id=request_id,
            reservation=Reservation(prompt, int(reply[2]) if allowed else least),
            bounded_by=states[bounded_index - 1] if bounded_index else None,
            lease=self.leases.hold(team, slots) if allowed and slots else None,
        )

    async def aclose(self) -> None:
        await self.leases.aclose()
