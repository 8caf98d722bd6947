"""A Redis circuit breaker shared by every call site on the request path.

Without it, a request under a Redis stall waits out one timeout per Redis call it makes (key
lookup, team lookup, admission): several seconds. Once a call has failed, the breaker is open for
a short cool-down: calls fail at once (cached keys still serve, admission follows the configured
fail mode), then one request's call probes Redis again with the normal timeout.
"""

from __future__ import annotations

import time


class RedisBreaker:
    def __init__(self, cool_down_s: float) -> None:
        self._cool_down_s = cool_down_s
        self._open_until = 0.0

    @property
    def open(self) -> bool:
        return time.monotonic() < self._open_until

    def trip(self) -> None:
        self._open_until = time.monotonic() + self._cool_down_s
