"""What one request weighs in a saturated pool's token fair share, and its priority band.

A request costs `(input_tokens + W_OUT * output_tokens) / team_weight` of its team's weighted
service. W_OUT = 2, as llm-d's fairness does: an output token holds a generation slot for a whole
decode step while an input token is one of thousands in a prefill, so with two the counters track
the engine time a request takes better than a plain token sum, without a model of the engine.

The cost is reserved at dispatch from the request's estimate (its prompt estimate and its
`max_tokens`, or the gateway's default) and corrected once, at settlement, to what it used
(`ShareTicket.settle`, called from the request's single settlement). A pool nobody waits in on any
replica charges nothing (`PoolShare.contended`), so nothing is corrected. A request dispatched more
than once (retried on another endpoint or pool) was charged each time: the last charge is
corrected to the actual cost, the earlier ones are given back whole. A request that failed costs
nothing, except one that timed out waiting for its worker: that one held the engine all along
(`ShareTicket.keep`: its estimate stays charged).

Priority bands: 1 (lowest) to 9, default 5. A higher band is served first; within a band, weighted
fair share. A request's band is the least of its key's and its team's `priority` (a key cannot
outrank its team), lowered further by the `x-sluicegate-priority` header; the header can never
raise it. A header that is not a whole number from 1 to 9 is ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

from gateway.limits.spec import PRIORITY_RANGE

W_OUT = 2.0
PRIORITY_MIN, PRIORITY_MAX = PRIORITY_RANGE
PRIORITY_DEFAULT = 5
PRIORITY_HEADER = "x-sluicegate-priority"


class Charged(Protocol):
    """Where a charge was made (gateway.routing.vtc.PoolShare): it takes the correction."""

    def correct(self, team: str, amount: float, charged: float) -> None:
        """Settles one charge of `charged` made there; `amount` (actual - charged) may be 0."""

    def settled(self, team: str, weighted: float) -> None: ...


# Counts past this are not believable; clamped so that a lying usage report cannot make a counter
# infinite (or raise in settlement, which must run whole).
_MAX_TOKENS = 2**40


def weighted_cost(prompt_tokens: int, completion_tokens: int, weight: int) -> float:
    prompt = min(max(prompt_tokens, 0), _MAX_TOKENS)
    completion = min(max(completion_tokens, 0), _MAX_TOKENS)
    return (prompt + W_OUT * completion) / max(weight, 1)


def band(key_priority: int | None, team_priority: int | None, header: str | None) -> int:
    """The request's priority band (see the module doc)."""
    # A team without one is at the default, which its keys cannot outrank either.
    team_band = PRIORITY_DEFAULT if team_priority is None else team_priority
    chosen = team_band if key_priority is None else min(key_priority, team_band)
    asked = None if header is None else header.strip()
    # isascii: str.isdigit() also takes digits int() refuses ("²", a byte a header may carry).
    if (
        asked is not None
        and asked.isascii()
        and asked.isdigit()
        and PRIORITY_MIN <= int(asked) <= PRIORITY_MAX
    ):
        chosen = min(chosen, int(asked))
    return chosen


@dataclass(slots=True)
class ShareTicket:
    """One request's place in the fair share: who pays, how much it is expected to cost, and the
    charges made for it, so that settlement corrects each exactly once."""

    team: str
    weight: int = 1
    band: int = PRIORITY_DEFAULT
    estimate: float = 1.0  # weighted cost charged at each dispatch
    charges: list[tuple[Charged, float]] = field(default_factory=list)
    settled: bool = False
    # When its first token must come by (time.monotonic()), or None (gateway/routing/deadline.py).
    deadline: float | None = None

    @classmethod
    def estimated(
        cls,
        team: str,
        weight: int,
        priority: int,
        prompt_tokens: int,
        completion_tokens: int,
        deadline: float | None = None,
    ) -> ShareTicket:
        cost = weighted_cost(prompt_tokens, completion_tokens, weight)
        estimate = cost if math.isfinite(cost) and cost > 0 else 1.0
        return cls(team, max(weight, 1), priority, estimate, deadline=deadline)

    def charged(self, where: Charged) -> float:
        """A dispatch charged this request's estimate at `where`; returns the amount."""
        self.charges.append((where, self.estimate))
        return self.estimate

    def settle(self, prompt_tokens: int, completion_tokens: int) -> None:
        """The request is over and used this much: correct every charge made for it, once."""
        self._settle(weighted_cost(prompt_tokens, completion_tokens, self.weight))

    def keep(self) -> None:
        """The request is over and held its engine until it timed out, which nothing reports the
        use of: its last dispatch stays charged at the estimate (the earlier ones are given back),
        so that requests made to time out do not take the pool for free."""
        self._settle(self.charges[-1][1] if self.charges else 0.0)

    def _settle(self, actual: float) -> None:
        if self.settled:
            return
        self.settled = True
        last = len(self.charges) - 1
        for i, (where, amount) in enumerate(self.charges):
            where.correct(self.team, (actual if i == last else 0.0) - amount, amount)
        if self.charges:
            self.charges[-1][0].settled(self.team, actual)
