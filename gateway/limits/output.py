"""The output cap of one request: how many tokens each answer may generate. The worker always
gets it explicitly (`max_tokens`, `max_completion_tokens` or `max_output_tokens`, whichever the
API has), and it is what admission reserves, so no request generates more than was charged.

Each step can only lower the cap, and the last that lowered it is the reason the client is told
(`x-sluicegate-max-tokens-limited-by`) when the worker's cap is not what it asked for:

    asked        the client's cap per answer, or none
    default      none asked: the model's `default_max_tokens`, else SLUICEGATE_DEFAULT_MAX_TOKENS
    max_output_tokens   the model's
    context_window      the window (the model's, or the smallest `max_model_len` its workers
                        report) less the prompt: the worker's own count where the model has
                        `tokenize: true` and the cap is near the window, else the estimate with
                        `CONTEXT_MARGIN`
    tokens_per_minute / budget   what the token limits and budgets can grant now (admit.lua)

The estimate is ~4 characters a token. When it is low by more than the margin, the worker refuses
the prompt and cap as too long for its context, and its 400 reaches the client as it is; when it
is high, a turn near the window is cut shorter than it had to be (it ends with `length` /
`max_tokens` as usual).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

from gateway.limits.admission import MIN_OUTPUT, Admission, Reservation

MAX_TOKENS_HEADER = "x-sluicegate-max-tokens"
LIMITED_BY_HEADER = "x-sluicegate-max-tokens-limited-by"
# The estimate (~4 characters a token) times this, plus a chat template's own tokens, is what the
# context clamp takes the prompt to be: code, JSON and most non-English text take more tokens per
# character than English prose, so the plain estimate would run short of the real count.
CONTEXT_MARGIN = 1.25
TEMPLATE_TOKENS = 64


class LimitedBy(enum.StrEnum):
    TOKENS_PER_MINUTE = "tokens_per_minute"
    BUDGET = "budget"
    MAX_OUTPUT_TOKENS = "max_output_tokens"
    CONTEXT_WINDOW = "context_window"
    DEFAULT = "default"


@dataclass(frozen=True, slots=True)
class AskedOutput:
    """What a request asks of its output: a cap per answer (None: it set none) and how many
    answers are generated (`n`, `best_of`; 0: none at all, as for embeddings)."""

    max_tokens: int | None
    answers: int = 1


NO_OUTPUT = AskedOutput(None, 0)


@dataclass(frozen=True, slots=True)
class OutputCap:
    asked: int | None  # per answer, as the client asked
    per_answer: int | None  # what the worker gets; None: the request generates nothing
    answers: int = 1
    limited_by: LimitedBy | None = None  # why `per_answer` is not `asked`

    @property
    def least(self) -> int:
        """The least output admission may grant: `MIN_OUTPUT` per answer, or all of it if less."""
        return min(self.per_answer or 0, MIN_OUTPUT) * self.answers

    def reservation(self, prompt_tokens: int) -> Reservation:
        return Reservation(prompt_tokens, (self.per_answer or 0) * self.answers)

    def lowered(self, per_answer: int, why: LimitedBy) -> OutputCap:
        if self.per_answer is None or per_answer >= self.per_answer:
            return self
        return replace(self, per_answer=max(0, per_answer), limited_by=why)

    def admitted(self, admission: Admission) -> OutputCap:
        """The cap once admission granted what fits the token limits and budgets."""
        if self.per_answer is None or not self.answers:
            return self
        granted = admission.reservation.completion_tokens // self.answers
        if granted >= self.per_answer:
            return self  # all it asked (the usual case): no reason to name
        return self.lowered(granted, LimitedBy(admission.limited_by or LimitedBy.TOKENS_PER_MINUTE))

    def headers(self) -> dict[str, str]:
        if self.per_answer is None or self.per_answer == self.asked or self.limited_by is None:
            return {}
        return {MAX_TOKENS_HEADER: str(self.per_answer), LIMITED_BY_HEADER: self.limited_by.value}


def static_cap(
    asked: AskedOutput,
    default_max_tokens: int,
    *,
    model_default: int | None = None,
    max_output_tokens: int | None = None,
) -> OutputCap:
    """The cap before the context window and admission: the default where none was asked, then
    the model's `max_output_tokens`."""
    if not asked.answers:
        return OutputCap(None, None, 0)
    if asked.max_tokens is None:
        cap = OutputCap(None, model_default or default_max_tokens, asked.answers, LimitedBy.DEFAULT)
    else:
        cap = OutputCap(asked.max_tokens, asked.max_tokens, asked.answers)
    if max_output_tokens is not None:
        cap = cap.lowered(max_output_tokens, LimitedBy.MAX_OUTPUT_TOKENS)
    return cap


def estimated_prompt_bound(estimate: int) -> int:
    """What the prompt may really be, from the gateway's estimate, for the context clamp."""
    return math.ceil(estimate * CONTEXT_MARGIN) + TEMPLATE_TOKENS


def near_window(cap: OutputCap, estimate: int, window: int) -> bool:
    """Whether the context clamp could lower this cap: only then is the real count worth a call."""
    return cap.per_answer is not None and estimated_prompt_bound(estimate) + cap.per_answer > window


def within_window(cap: OutputCap, prompt_tokens: int, window: int) -> OutputCap:
    """The cap lowered to what the window leaves after the prompt, but never below the least a
    turn is worth: a prompt that does not fit at all is the worker's to refuse."""
    if cap.per_answer is None:
        return cap
    room = max(window - prompt_tokens, min(cap.per_answer, MIN_OUTPUT))
    return cap.lowered(room, LimitedBy.CONTEXT_WINDOW)
