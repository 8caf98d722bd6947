"""Admission: every limit of a request (requests, tokens and concurrency per key, team and model,
and team and key token budgets) checked and charged by one Lua script (gateway/redis/lua/admit.lua)
in one Redis round trip; settled with the real usage by gateway/redis/lua/settle.lua when the request ends.

A limit of N per minute allows a burst of N and then one unit per 60/N s (GCRA, the smooth
equivalent of a sliding window). Token limits and budgets charge a reservation at admission (the
prompt estimate plus the output cap, gateway/limits/output.py) and settle the difference
afterwards, so a stream overshoots a limit by at most its own reservation error.

An output cap larger than a token limit or budget can take now does not refuse the request: the
script grants the largest output that fits every limit (a multiple of the answers asked for), the
worker gets that as its cap, and that is what is charged. Only a prompt that cannot be admitted
with `MIN_OUTPUT` tokens of output is refused: a 429 to retry, or a 400 when no wait would do.

Here: what a limit is and what an admission decided (its states, its refusal, its settlements);
the call itself, and what happens while Redis is away, is gateway/limits/limiter.py's.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.errors import ErrorCode, GatewayError
from gateway.limits.leases import Lease
from gateway.limits.spec import TokenCount
from gateway.pricing import Price, amount, from_nano


class LimitKind(enum.Enum):
    """What a limit counts; the value is the letter admit.lua and settle.lua know it by."""

    def __init__(self, label: str, script_kind: str, metric_label: str) -> None:
        self.label = label
        self.script_kind = script_kind
        self.metric_label = metric_label  # `limit` on sluicegate_rate_limited_total

    REQUESTS = ("requests", "g", "rpm")  # GCRA, one per request
    TOKENS = ("tokens", "g", "tpm")  # GCRA, the reserved tokens
    CONCURRENCY = ("concurrency", "c", "concurrency")  # slots, one per request in flight
    BUDGET = ("budget", "b", "budget")  # tokens per calendar period
    # Nano-units of money per calendar period, at the request's model's prices (gateway/pricing.py)
    MONEY = ("money", "b", "money")


# The members as plain names, for the loops that run per limit on every request: in Python 3.11
# each `LimitKind.X` or `TokenCount.X` read is a descriptor call, ~5x a global's.
_REQUESTS, _TOKENS = LimitKind.REQUESTS, LimitKind.TOKENS
_CONCURRENCY, _BUDGET, _MONEY = LimitKind.CONCURRENCY, LimitKind.BUDGET, LimitKind.MONEY
_TOTAL, _INPUT, _OUTPUT = TokenCount.TOTAL, TokenCount.INPUT, TokenCount.OUTPUT

# A slot outlives a replica that died mid-request by this much at most; a running request's slot
# is renewed well before (gateway/limits/leases.py), however long it runs.
CONCURRENCY_LEASE_S = 60.0
# The least output per answer worth admitting a request for (or all it asked, if less): below
# this a turn would end before it said anything, so the request waits (429) instead.
MIN_OUTPUT = 16


@dataclass(frozen=True, slots=True)
class Limit:
    kind: LimitKind
    redis_key: str
    amount: int  # per minute, in flight, or tokens per period
    description: str  # names the limit in a 429, e.g. "team ml tokens per minute"
    counts: TokenCount = TokenCount.TOTAL  # which tokens a TOKENS limit counts
    # BUDGET: seconds until the period ends. An int by default: admit.lua gets it as text, and
    # an int's is shorter and cheaper to make than a float's repr().
    period_s: float = 60
    scope: str = "key"  # whose limit: "key" or "team" (`scope` on sluicegate_rate_limited_total)
    name: str = ""  # the LimitSet field it comes from (rpm, tpm, max_concurrency, daily_tokens, ...)
    model: str | None = None  # set for a per-model limit
    price: Price | None = None  # MONEY: the prices of the request's model, what its tokens cost


def money_costs(price: Price, prompt: int) -> tuple[int, int]:
    """(nano-units for the prompt, nano-units per output token), each rounded up: what admit.lua
    charges a MONEY limit is the first plus the second times the output granted, integers all
    (below 2^53 while the budget is: the script never charges more than what is left)."""
    return price.nano_cost(prompt, 0), price.nano_cost(0, 1)


@dataclass(frozen=True, slots=True)
class Reservation:
    prompt_tokens: int
    completion_tokens: int

    def tokens(self, counts: TokenCount) -> int:
        if counts == _INPUT:
            return self.prompt_tokens
        if counts == _OUTPUT:
            return self.completion_tokens
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class LimitState:
    limit: Limit
    remaining: int
    reset_after_s: float
    retry_after_s: float


@dataclass(frozen=True, slots=True)
class Admission:
    """`reservation`: what was charged (the output granted, which may be less than asked); on a
    refusal, the least that would have been admitted."""

    allowed: bool
    states: tuple[LimitState, ...]
    denied_by: LimitState | None
    request_id: str = ""
    reservation: Reservation = Reservation(0, 0)
    bounded_by: LimitState | None = None  # the limit that granted less output than asked
    lease: Lease | None = None  # its concurrency slots, renewed until the request ends

    def end(self) -> None:
        """The request is over: its concurrency slots are no longer renewed (settle.lua frees them)."""
        if self.lease is not None:
            self.lease.end()

    @property
    def limited_by(self) -> str | None:
        """Why the output granted is less than asked (x-sluicegate-max-tokens-limited-by)."""
        if self.bounded_by is None:
            return None
        kind = self.bounded_by.limit.kind
        return "budget" if kind is _BUDGET or kind is _MONEY else "tokens_per_minute"

    def tightest(self, kind: LimitKind) -> LimitState | None:
        """The state a client should see for one kind of limit: the one that refused, else the
        one with the least left."""
        if self.denied_by is not None and self.denied_by.limit.kind is kind:
            return self.denied_by
        # A plain loop, not min() over a generator with a key: called for every kind on every
        # answer's headers (the first of the least wins, as min() would pick).
        best: LimitState | None = None
        for state in self.states:
            if state.limit.kind is kind and (best is None or state.remaining < best.remaining):
                best = state
        return best

    def refusal_labels(self) -> tuple[str, str]:
        """(limit, scope) of the limit that refused, for sluicegate_rate_limited_total: which kind
        (rpm, tpm, concurrency, budget) and whose (key, team); never which key."""
        assert self.denied_by is not None
        limit = self.denied_by.limit
        return limit.kind.metric_label, limit.scope

    def error(self) -> GatewayError:
        assert self.denied_by is not None
        limit = self.denied_by.limit
        needed = self.reservation.tokens(limit.counts)
        if limit.kind is LimitKind.TOKENS and needed > limit.amount:
            # No wait makes this request fit: a 429 would only send SDKs into retries. (A budget
            # stays a 429 insufficient_quota: its owner can raise it, and the next period renews it.)
            setting = f" ('{limit.name}')" if limit.name else ""
            return GatewayError(
                ErrorCode.INVALID_REQUEST,
                f"This request needs at least {needed} tokens (its prompt, about "
                f"{self.reservation.prompt_tokens}, and {self.reservation.completion_tokens} of output), "
                f"more than {limit.description}{setting} allows at once ({limit.amount}): "
                "shorten the prompt.",
            )
        retry_after = max(1, math.ceil(self.denied_by.retry_after_s))
        headers = {"retry-after": str(retry_after)}
        if limit.kind is _MONEY:
            return GatewayError(
                ErrorCode.INSUFFICIENT_QUOTA,
                f"Money budget exhausted: {limit.description} ({amount(from_nano(limit.amount))} "
                f"{limit.price.currency if limit.price else ''}). It renews in {retry_after} s.",
                headers=headers,
            )
        if limit.kind is LimitKind.BUDGET:
            return GatewayError(
                ErrorCode.INSUFFICIENT_QUOTA,
                f"Token budget exhausted: {limit.description} ({limit.amount} tokens). "
                f"It renews in {retry_after} s.",
                headers=headers,
            )
        return GatewayError(
            ErrorCode.RATE_LIMIT_EXCEEDED,
            f"Rate limit reached: {limit.description} (limit {limit.amount}). Retry after {retry_after} s.",
            headers=headers,
        )

    def settlements(
        self, prompt: int, completion: int, *, charged: Price | bool | None = True
    ) -> list[tuple[str, str, str]]:
        """(redis key, settle.lua kind, argument) for every limit this admission charged.
        `charged`: the price the request's tokens cost at, when it is not the one its money was
        reserved at (True): a request that may overflow reserves at the higher of its model's
        and its providers' prices, and costs what whoever served it charges (None: nothing)."""
        # What each way of counting gives back, worked out once rather than per limit.
        back_in = self.reservation.prompt_tokens - prompt
        back_out = self.reservation.completion_tokens - completion
        given_back = {
            _INPUT: back_in,
            _OUTPUT: back_out,
            _TOTAL: back_in + back_out,
        }
        out: list[tuple[str, str, str]] = []
        for state in self.states:
            limit = state.limit
            if limit.kind is _TOKENS:
                give_back = given_back[limit.counts]
                if give_back:
                    out.append(
                        (
                            limit.redis_key,
                            limit.kind.script_kind,
                            f"{limit.period_s / limit.amount!r}:{give_back}",
                        )
                    )
            elif limit.kind is _CONCURRENCY:
                out.append((limit.redis_key, limit.kind.script_kind, self.request_id))
            elif limit.kind is _BUDGET:
                give_back = back_in + back_out
                if give_back:
                    out.append((limit.redis_key, limit.kind.script_kind, str(give_back)))
            elif limit.kind is _MONEY and limit.price is not None:
                # What was reserved, less what the tokens cost: both rounded up, integers.
                fixed, per_output = money_costs(limit.price, self.reservation.prompt_tokens)
                reserved = fixed + per_output * self.reservation.completion_tokens
                price = limit.price if charged is True else charged if isinstance(charged, Price) else None
                give_back = reserved - (price.nano_cost(prompt, completion) if price is not None else 0)
                if give_back:
                    out.append((limit.redis_key, limit.kind.script_kind, str(give_back)))
        return out


def unlimited(reservation: Reservation) -> Admission:
    """An admission that charged nothing (no limits, or Redis away with fail-open): the output
    asked is granted whole."""
    return Admission(allowed=True, states=(), denied_by=None, reservation=reservation)


def script_costs(limits: Sequence[Limit], prompt: int) -> list[tuple[int, int]]:
    """(fixed cost, what each output token adds: 0, 1, or a MONEY limit's nano-units) of each
    limit in admit.lua, in one pass."""
    out: list[tuple[int, int]] = []
    for limit in limits:
        if limit.kind in (_REQUESTS, _CONCURRENCY):
            out.append((1, 0))
            continue
        if limit.kind is _MONEY:
            out.append(money_costs(limit.price, prompt) if limit.price is not None else (0, 0))
            continue
        counts = _TOTAL if limit.kind is _BUDGET else limit.counts
        out.append(((0 if counts is _OUTPUT else prompt), (0 if counts is _INPUT else 1)))
    return out
