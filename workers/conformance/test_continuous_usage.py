"""SSE-10: `stream_options.continuous_usage_stats` puts the usage so far on every chunk.

The gateway asks for it so that a stream its client abandons is metered with the worker's own
counts up to the last chunk relayed, not with an estimate. With it, every chunk with a choice
carries a `usage` whose `completion_tokens` counts the tokens generated so far (never going down;
the role chunk counts 0), `prompt_tokens` stays the same, and the final usage chunk of SSE-7 still
comes, agreeing with the last running count. Without it, or without `include_usage` (vLLM then
ignores it), SSE-7 and SSE-8 hold unchanged.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from workers.conformance.checks import is_int
from workers.conformance.conftest import Exchanges, stream_context
from workers.conformance.rules import rule, should

KINDS = ["chat", "completions"]
_NAMES = ("prompt_tokens", "completion_tokens", "total_tokens")


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


def _counts(usage: Any) -> tuple[int, int] | None:
    """(prompt, completion) of a complete usage object; None when it is not one."""
    if not isinstance(usage, dict) or not all(is_int(usage.get(name)) for name in _NAMES):
        return None
    prompt, completion, total = (usage[name] for name in _NAMES)
    if prompt < 1 or completion < 0 or total != prompt + completion:
        return None
    return prompt, completion


@pytest.mark.rules("SSE-10", "REQ-4")
def test_every_chunk_carries_the_usage_so_far(exchanges: Exchanges, kind: str) -> None:
    stream, where = exchanges.stream(kind, "continuous"), stream_context(kind, "continuous")
    # The gateway sends this to every worker: one that does not count per chunk must still answer.
    rule("REQ-4", stream.reply.status == 200, f"{where}: expected 200, saw {stream.reply.brief()}")
    with_choices = stream.with_choices
    rule("SSE-6", with_choices, f"{where}: expected chunks with choices, saw {stream.reply.brief()}")
    missing = [number for number, c in enumerate(with_choices, 1) if c.get("usage") is None]
    should(
        "SSE-10",
        not missing,
        f"{where}: expected usage on every chunk with choices, saw none on chunks {missing[:8]} "
        f"of {len(with_choices)}",
    )
    running: list[tuple[int, int]] = []
    for number, chunk in enumerate(with_choices, 1):
        counts = _counts(chunk["usage"])
        should(
            "SSE-10",
            counts is not None,
            f"{where}: chunk {number}: expected integer prompt_tokens >= 1, completion_tokens >= 0 and "
            f"total_tokens = their sum, saw usage {chunk['usage']!r}",
        )
        assert counts is not None
        running.append(counts)
    prompts = sorted({prompt for prompt, _ in running})
    should("SSE-10", len(prompts) == 1, f"{where}: expected one prompt_tokens on every chunk, saw {prompts}")
    completions = [completion for _, completion in running]
    went_down = [(n, a, b) for n, (a, b) in enumerate(itertools.pairwise(completions), 2) if b < a]
    should(
        "SSE-10",
        not went_down,
        f"{where}: expected completion_tokens never to go down, saw (chunk, before, then) {went_down[:3]} "
        f"in {completions}",
    )
    final = [c for c in stream.chunks if c.get("choices") == []]
    should(
        "SSE-10",
        len(final) == 1 and final[0] is stream.chunks[-1],
        f'{where}: expected the final usage chunk ("choices": []) right before [DONE] as with '
        f"include_usage alone (SSE-7), saw {len(final)} such chunks, last chunk {stream.chunks[-1:]}",
    )
    closing = _counts(final[0].get("usage"))
    should(
        "SSE-10",
        closing == running[-1],
        f"{where}: expected the final usage chunk to agree with the last running count "
        f"(prompt, completion) {running[-1]}, saw usage {final[0].get('usage')!r}",
    )


@pytest.mark.rules("SSE-7", "SSE-8")
@pytest.mark.parametrize("mode", ["continuous-off", "continuous-alone"])
def test_no_running_usage_unless_asked(exchanges: Exchanges, kind: str, mode: str) -> None:
    stream, where = exchanges.stream(kind, mode), stream_context(kind, mode)
    carrying = [c for c in stream.chunks if c.get("usage") is not None]
    if mode == "continuous-off":
        rule(
            "SSE-7",
            len(carrying) == 1 and carrying[0].get("choices") == [],
            f"{where}: expected exactly one chunk with usage, the final one with choices [], saw "
            f"{len(carrying)}: {carrying[:2]}",
        )
    else:
        # vLLM counts continuous_usage_stats only together with include_usage.
        rule("SSE-8", not carrying, f"{where}: expected no chunk with usage, saw {carrying[:2]}")
