"""One finished request's usage, as the meter writes it and the spool keeps it."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass


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
    # (limit key, kind, argument) for settle.lua: token refunds, concurrency slots to release.
    settlements: tuple[tuple[str, str, str], ...] = ()
    # An admission whose reply was lost: give back what it charged, if it did; meter nothing. Also
    # how a call that generates nothing frees its slots (gateway.proxy.request_limits).
    void: bool = False
    # The client API (a dialect's name). "" in a record spooled before usage had it: it is then
    # metered as the old layout wrote it, which reports show with no api.
    api: str = ""
    # What it cost, decided when it ran (gateway/pricing.py): nano-units at the prices of
    # `price_version` (pricing.UNPRICED: its model had none, so nothing). "" in a record from before
    # costs were recorded: its usage is written without a cost, and reports price it as today.
    cost_nano: int = 0
    price_version: str = ""
    # Who answered when it was not the model's own workers: "overflow:<provider>" (gateway/overflow/).
    # A row of the usage report of its own; "" for the workers.
    served_by: str = ""

    @staticmethod
    def today() -> str:
        return dt.datetime.now(dt.UTC).date().isoformat()
