"""Stores the app is handed in place of its Redis ones (gateway/redis/store.py): a test's
in-process store, or a second backend's. Each field is the narrow interface its consumer declares;
None means the Redis store. The other concerns' stores follow the same shape when one is needed."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.limits.limiter import AdmitStore
from gateway.metering.meter import UsageWrites
from gateway.routing.stored_responses import Holders


@dataclass(frozen=True, slots=True)
class Stores:
    usage: UsageWrites | None = None  # settle.lua's side: usage, settlements, the usage report
    admission: AdmitStore | None = None  # admit.lua's side, and the concurrency leases' renewals
    holders: Holders | None = None  # who holds a stored response
