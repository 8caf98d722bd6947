"""Token counts as a worker reports them, checked before they are metered or charged.

A worker is not trusted: a count that is not a plain non-negative integer below `MAX_TOKENS` (a
bool, a float, a string, a negative number, 2**63 - 1) is a lie or a bug. Such a report is
treated as no report at all: the request is metered with the gateway's own estimate and counted
as an error, so one bad worker can neither overflow a team's usage counters nor break the
settlement of every later request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# No model has a context window near 2**31 tokens; a count above it cannot be real.
MAX_TOKENS = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class InvalidUsage(ValueError):
    """The worker's usage report is not believable; the message names the field, never its value."""


def parse_usage(report: Any) -> Usage:
    """A worker's `usage` object as checked counts. A missing `completion_tokens` is 0 (an
    embeddings answer has none); anything else that is wrong raises InvalidUsage."""
    if not isinstance(report, dict):
        raise InvalidUsage("usage is not an object")
    # A count is an int (not a bool, not a float) from 0 to MAX_TOKENS; checked inline, as this
    # runs on every chunk of a stream that reports usage as it goes.
    prompt = report.get("prompt_tokens")
    if type(prompt) is not int or not 0 <= prompt <= MAX_TOKENS:
        raise InvalidUsage("usage.prompt_tokens is not a count")
    completion = report.get("completion_tokens", 0)
    if completion is None:
        completion = 0
    if type(completion) is not int or not 0 <= completion <= MAX_TOKENS:
        raise InvalidUsage("usage.completion_tokens is not a count")
    return Usage(prompt, completion)
