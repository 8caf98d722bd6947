"""Failed admin-token attempts, counted per client address: after `max_failures` within `window_s`
a wrong token from the address gets 429 without being checked further or logged, for `lockout_s`.
The right token is never refused: behind an ingress or NAT everyone shares one address, and a
throttle that refused the right token would let anyone without it lock the admin out. The token's
length (at least 32 characters, config.py) is what protects it; the throttle bounds the load and
the log noise of guessing. One per app, built with AdminDeps; memory is bounded by
`max_addresses`, oldest first out, so a flood of addresses cannot grow it.

The address is the TCP peer, or behind a trusted proxy (SLUICEGATE_TRUSTED_PROXIES) the nearest
X-Forwarded-For entry that is not itself trusted: otherwise one guesser behind the ingress would
lock every operator out.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import Scope

from gateway.http.networks import Networks

MAX_FAILURES = 10
WINDOW_S = 60.0
LOCKOUT_S = 300.0
MAX_ADDRESSES = 10_000


@dataclass(slots=True)
class _Failures:
    first_at: float  # the window's start
    count: int
    locked_until: float = 0.0


class AdminThrottle:
    def __init__(
        self,
        trusted: Networks = (),
        *,
        max_failures: int = MAX_FAILURES,
        window_s: float = WINDOW_S,
        lockout_s: float = LOCKOUT_S,
        max_addresses: int = MAX_ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._trusted = trusted
        self._max_failures = max_failures
        self._window_s = window_s
        self._lockout_s = lockout_s
        self._max_addresses = max_addresses
        self._clock = clock
        # Ordered by last failure: the oldest entry is the first to go when full.
        self._by_address: OrderedDict[str, _Failures] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_address)

    def address(self, scope: Scope) -> str:
        client = scope.get("client")
        peer = str(client[0]) if client else ""
        if not self._is_trusted(peer):
            return peer
        hops: list[str] = []
        for name, value in scope["headers"]:
            if name == b"x-forwarded-for":
                hops.extend(h.strip() for h in value.decode("latin-1").split(","))
        # Right to left: each trusted proxy appended the address it saw.
        for hop in reversed(hops):
            if hop and not self._is_trusted(hop):
                return hop
        return peer

    def retry_after(self, address: str) -> int | None:
        """Whole seconds until `address` may try again; None when it is not locked out."""
        entry = self._by_address.get(address)
        if entry is None:
            return None
        left = entry.locked_until - self._clock()
        return max(1, math.ceil(left)) if left > 0 else None

    def failed(self, address: str) -> None:
        now = self._clock()
        entry = self._by_address.pop(address, None)
        if entry is None or now - entry.first_at >= self._window_s:
            entry = _Failures(first_at=now, count=0, locked_until=entry.locked_until if entry else 0.0)
        entry.count += 1
        if entry.count >= self._max_failures:
            entry.locked_until = now + self._lockout_s
        self._by_address[address] = entry
        while len(self._by_address) > self._max_addresses:
            self._by_address.popitem(last=False)

    def _is_trusted(self, address: str) -> bool:
        if not self._trusted or not address:
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self._trusted)
