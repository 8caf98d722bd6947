"""A Redis circuit breaker shared by every call site on the request path.

Without it, a request under a Redis stall waits out one timeout per Redis call it makes (key
lookup, team lookup, admission): several seconds. Once Redis has failed `failures_to_open` times
in a row, the breaker is open for a short cool-down: calls fail at once (cached keys still serve,
admission follows the configured fail mode), then one request's call probes Redis again with the
normal timeout.

In a row means each failed call was made after the previous failure was seen, with no answer in
between: calls that were already out when one failed are the same failure, not more. A replica
whose own event loop is saturated (a 5,000-stream ramp) reads every reply late at once; that is
one failure, and the next call, made after it, is answered: no opening for every key for one busy
moment of the gateway's own. A real outage fails the calls made after it too, and opens the
breaker after `failures_to_open` timeouts (at once when Redis refuses the connection).

One call may probe earlier: the lookup of a key this replica has not seen, which would otherwise be
refused for the whole cool-down. One probe at a time, so a stall costs one waiting request, not one
per new key; an answer closes the breaker.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("sluicegate.redis")

FAILURES_TO_OPEN = 3


class RedisBreaker:
    def __init__(self, cool_down_s: float, failures_to_open: int = FAILURES_TO_OPEN) -> None:
        self._cool_down_s = cool_down_s
        self._failures_to_open = failures_to_open
        self._open_until = 0.0
        self._probing = False
        # Failures in a row so far; read by the hot path, which calls `answered` only when it is not 0.
        self.in_a_row = 0
        self._failed_at = float("-inf")  # when the last failure that counted was seen

    @property
    def open(self) -> bool:
        return time.monotonic() < self._open_until

    def answered(self) -> None:
        """A call was answered: Redis is there, and the failures before it were not in a row."""
        self.in_a_row = 0

    def failed(self, site: str, error: BaseException, started_at: float) -> None:
        """A call made at `started_at` (time.monotonic()) failed. `site` names it; the error is
        named by its class only (a Redis error's text may quote a command's arguments: key names,
        a team's id)."""
        if started_at <= self._failed_at:
            return  # out already when the last failure was seen: the same one
        now = time.monotonic()
        self._failed_at = now
        self.in_a_row += 1
        if self.in_a_row < self._failures_to_open:
            return
        if not self.open:
            # Once per opening: an operator reading a burst of 503s learns which call began it.
            log.warning(
                "redis breaker open for %.1fs: %s failed (%s; %d in a row)",
                self._cool_down_s,
                site,
                type(error).__name__,
                self.in_a_row,
            )
        self._open_until = now + self._cool_down_s

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
            self.in_a_row = 0
