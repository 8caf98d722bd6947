"""A Redis circuit breaker shared by every call site on the request path.

Without it, a request under a Redis stall waits out one timeout per Redis call it makes (key
lookup, team lookup, admission): several seconds. Once a call has failed, the breaker is open for
a short cool-down: calls fail at once (cached keys still serve, admission follows the configured
fail mode), then one request's call probes Redis again with the normal timeout.

One call may probe earlier: the lookup of a key this replica has not seen, which would otherwise be
refused for the whole cool-down even if the call that opened the breaker was one slow reply on a
busy machine. One probe at a time, so a stall costs one waiting request, not one per new key; an
answer closes the breaker.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("sluicegate.redis")


class RedisBreaker:
    def __init__(self, cool_down_s: float) -> None:
        self._cool_down_s = cool_down_s
        self._open_until = 0.0
        self._probing = False

    @property
    def open(self) -> bool:
        return time.monotonic() < self._open_until

    def trip(self, site: str, error: BaseException) -> None:
        """`site` names the call that failed; the error is named by its class only (a Redis
        error's text may quote a command's arguments: key names, a team's id)."""
        if not self.open:
            # Once per opening: an operator reading a burst of 503s learns which call began it.
            log.warning(
                "redis breaker open for %.1fs: %s failed (%s)", self._cool_down_s, site, type(error).__name__
            )
        self._open_until = time.monotonic() + self._cool_down_s

    def probe(self) -> bool:
        """While open: True for one caller at a time, who reports its call with `probed`."""
        if self._probing:
            return False
        self._probing = True
        return True

    def probed(self, answered: bool) -> None:
        self._probing = False
        if answered:
            self._open_until = 0.0
