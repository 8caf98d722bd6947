"""A request that passed every check before the worker (gateway.proxy.pipeline's `_admit`), as the
rest of the pipeline reads it."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.keys.auth import Principal
from gateway.limits.admission import Admission
from gateway.limits.output import OutputCap
from gateway.overflow.providers import ModelOverflow
from gateway.pricing import Price
from gateway.proxy.cache_salt import SaltScope
from gateway.proxy.dialect import Call
from gateway.routing.router import ModelRoute
from gateway.routing.share import ShareTicket
from gateway.routing.stored_responses import Holder


@dataclass(frozen=True, slots=True)
class Admitted:
    """A request that passed every check before the worker."""

    call: Call
    principal: Principal
    requested: ModelRoute
    admission: Admission
    holder: Holder | None  # where what the call continues is kept
    cap: OutputCap  # what the worker may generate per answer: what admission granted
    salt: SaltScope  # the worker's cache_salt, per pool (gateway.proxy.cache_salt)
    # The prompt's estimate with the history of the conversation it continues: what the worker
    # prefills, so what is reserved, and billed when the worker reports no usage.
    prompt_estimate: int
    priority: int  # its band in a saturated pool (gateway/routing/share.py)
    deadline: float | None  # when its first token must come by, time.monotonic() (routing/deadline.py)
    # The model's overflow when this request is one that could take it (gateway/overflow/), and
    # whether its team and key allow it: then its money was reserved at the higher price.
    overflow: ModelOverflow | None = None
    overflow_allowed: bool = False
    price: Price | None = None  # the model's, with its batch multiplier for a batch line

    def share_ticket(self) -> ShareTicket:
        """The request's weight in a saturated pool's token fair share, from what it reserved."""
        estimate = self.admission.reservation
        return ShareTicket.estimated(
            self.principal.key.team,
            self.principal.team_limits.share_weight,
            self.priority,
            estimate.prompt_tokens,
            estimate.completion_tokens,
            self.deadline,
        )
