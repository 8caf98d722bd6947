"""What the worker needs from an engine, shaped like Reframr's runtime.

`ReframrModel.generate_text(context, max_tokens=..., reasoning_mode=..., temperature=..., top_k=...,
top_p=..., repetition_penalty=...)` returns the whole answer; that is the one required method. Two
capabilities are optional and detected with `isinstance` on the runtime-checkable protocols below:

- `TokenStreamer.iter_tokens(...)` (same arguments) yields the answer one token's text at a time.
  The worker then streams honestly and can stop a generation at the next token; without it the
  finished text is cut into chunks after the fact, and `/metrics` says so.
- `Tokenizer.count_tokens(text)` counts tokens with the engine's own tokenizer. Without it usage is
  a whitespace estimate and responses say so (`x-usage-estimated: true`).

Engines are called from one worker thread, one generation at a time, so they need not be
thread-safe, except `count_tokens`: the event loop calls it (for prompts and answers) while a
generation may be running, which a pure tokenizer allows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

REASONING_MODES = ("none", "deep", "memory", "tool")
# Reframr's own `generate_text` default; vLLM's (the context left) has no meaning for Reframr.
DEFAULT_MAX_TOKENS = 120


@dataclass(frozen=True, slots=True)
class Sampling:
    """Sampling settings, defaulting to Reframr's own."""

    temperature: float = 0.58
    top_k: int = 64
    top_p: float = 0.92
    repetition_penalty: float = 1.25


@dataclass(frozen=True, slots=True)
class Job:
    """One generation as the engine sees it."""

    context: str
    max_tokens: int = DEFAULT_MAX_TOKENS
    reasoning_mode: str | None = None
    sampling: Sampling = Sampling()


class Engine(Protocol):
    def generate_text(
        self,
        context: str,
        max_tokens: int,
        reasoning_mode: str | None,
        temperature: float,
        top_k: int,
        top_p: float,
        repetition_penalty: float,
    ) -> str: ...


@runtime_checkable
class TokenStreamer(Protocol):
    def iter_tokens(
        self,
        context: str,
        max_tokens: int,
        reasoning_mode: str | None,
        temperature: float,
        top_k: int,
        top_p: float,
        repetition_penalty: float,
    ) -> Iterator[str]: ...


@runtime_checkable
class Tokenizer(Protocol):
    def count_tokens(self, text: str) -> int: ...


def generate_text(engine: Engine, job: Job) -> str:
    s = job.sampling
    return engine.generate_text(
        job.context,
        max_tokens=job.max_tokens,
        reasoning_mode=job.reasoning_mode,
        temperature=s.temperature,
        top_k=s.top_k,
        top_p=s.top_p,
        repetition_penalty=s.repetition_penalty,
    )


def iter_tokens(engine: TokenStreamer, job: Job) -> Iterator[str]:
    s = job.sampling
    return engine.iter_tokens(
        job.context,
        max_tokens=job.max_tokens,
        reasoning_mode=job.reasoning_mode,
        temperature=s.temperature,
        top_k=s.top_k,
        top_p=s.top_p,
        repetition_penalty=s.repetition_penalty,
    )


def streaming_mode(engine: Engine) -> str:
    return "token" if isinstance(engine, TokenStreamer) else "buffered"


def count_tokens(engine: Engine, text: str) -> int:
    """Tokens in `text` by the engine's tokenizer, else the number of whitespace-separated words."""
    if isinstance(engine, Tokenizer):
        return engine.count_tokens(text)
    return len(text.split())


class EngineLoader:
    """An engine that takes a while to build (Reframr loads large answer tables).

    The app runs `load` in its engine thread at startup and answers 503 until it returns.
    """

    def __init__(self, load: Callable[[], Engine], description: str = "engine") -> None:
        self.load = load
        self.description = description
