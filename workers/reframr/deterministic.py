"""A deterministic engine with Reframr's interface and no weights, for tests and demos.

The answer depends on the context alone. One token is one whitespace-separated word; tokens are
joined by single spaces (pieces: the first word, then " word" for each next one).

- Tool trigger: when the last turn is a user turn containing `call NAME`, the answer is
  `<tool_call> NAME ARGS`, where ARGS is the rest of that line after NAME, or `{}` when nothing
  follows. The engine does not know the request's tools (Reframr does not either); the worker
  decides whether NAME is callable, so `call nope` and `call f {oops` test the refusals.
- Otherwise: `mode=<reasoning_mode, or "default" when None>`, then the words of the last turn
  (its `User:` / `<tool_result>` label dropped), then filler words `w<i>` (i: the word's
  position) up to `answer_tokens` words.
- At most `max_tokens` words either way.

Knobs for tests: `token_delay_s` (each token takes that long; `generate_text` sleeps the sum),
`gate` (generation waits for this Event first, for at most `gate_timeout_s`). Every call is
recorded in `calls` (the last 1000) as it happens, from the engine thread.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from workers.reframr.context import USER, last_turn
from workers.reframr.tools import TOOL_CALL_TAG, TOOL_RESULT_TAG

_LABEL = re.compile(rf"^(?:\w+:|{re.escape(TOOL_RESULT_TAG)})\s*")
_CALL = re.compile(r"\bcall\s+(\S+)[ \t]*(.*)")


@dataclass
class GenerationRecord:
    context: str
    max_tokens: int
    reasoning_mode: str | None
    sampling: tuple[float, int, float, float]
    """temperature, top_k, top_p, repetition_penalty"""
    streamed: bool
    tokens: int = 0
    """Tokens produced so far."""
    completed: bool = False
    """Every token of the answer was produced (False when the worker stopped it early)."""
    closed: bool = False


@dataclass
class DeterministicEngine:
    answer_tokens: int = 12
    token_delay_s: float = 0.0
    gate: threading.Event | None = None
    gate_timeout_s: float = 10.0
    # Bounded: a benchmark may send this engine millions of requests.
    calls: deque[GenerationRecord] = field(default_factory=lambda: deque(maxlen=1000))

    def answer_words(self, context: str, max_tokens: int, reasoning_mode: str | None) -> list[str]:
        turn = last_turn(context)
        call = _CALL.search(turn) if turn.startswith(USER) else None
        if call is not None:
            words = [TOOL_CALL_TAG, call.group(1), *(call.group(2).split() or ["{}"])]
        else:
            echo = _LABEL.sub("", turn).split()
            words = [f"mode={reasoning_mode or 'default'}", *echo][: self.answer_tokens]
            words += [f"w{i}" for i in range(len(words), self.answer_tokens)]
        return words[:max_tokens]

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def _begin(
        self, streamed: bool, context: str, max_tokens: int, mode: str | None, *sampling: float
    ) -> GenerationRecord:
        temperature, top_k, top_p, penalty = sampling
        record = GenerationRecord(
            context, max_tokens, mode, (temperature, int(top_k), top_p, penalty), streamed
        )
        self.calls.append(record)
        if self.gate is not None:
            self.gate.wait(self.gate_timeout_s)
        return record

    def generate_text(
        self,
        context: str,
        max_tokens: int,
        reasoning_mode: str | None,
        temperature: float,
        top_k: int,
        top_p: float,
        repetition_penalty: float,
    ) -> str:
        record = self._begin(
            False, context, max_tokens, reasoning_mode, temperature, top_k, top_p, repetition_penalty
        )
        words = self.answer_words(context, max_tokens, reasoning_mode)
        time.sleep(self.token_delay_s * len(words))
        record.tokens, record.completed, record.closed = len(words), True, True
        return " ".join(words)

    def iter_tokens(
        self,
        context: str,
        max_tokens: int,
        reasoning_mode: str | None,
        temperature: float,
        top_k: int,
        top_p: float,
        repetition_penalty: float,
    ) -> Iterator[str]:
        record = self._begin(
            True, context, max_tokens, reasoning_mode, temperature, top_k, top_p, repetition_penalty
        )
        try:
            for i, word in enumerate(self.answer_words(context, max_tokens, reasoning_mode)):
                time.sleep(self.token_delay_s)
                record.tokens += 1
                yield word if i == 0 else f" {word}"
            record.completed = True
        finally:
            record.closed = True


class TextOnly:
    """Another engine seen as Reframr's runtime ships: `generate_text` only, no token iterator and
    no tokenizer, so the worker streams buffered and estimates usage."""

    def __init__(self, inner: DeterministicEngine) -> None:
        self.inner = inner

    def generate_text(
        self,
        context: str,
        max_tokens: int,
        reasoning_mode: str | None,
        temperature: float,
        top_k: int,
        top_p: float,
        repetition_penalty: float,
    ) -> str:
        return self.inner.generate_text(
            context, max_tokens, reasoning_mode, temperature, top_k, top_p, repetition_penalty
        )
