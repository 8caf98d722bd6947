"""From the engine's text pieces to what the client may see: stop sequences and tool calls.

Text is released as content as soon as it can no longer turn out to be (the start of) a stop
sequence or a tool call, so a stream never has to take back what it sent:

- A stop sequence ends the answer before its first occurrence (finish_reason "stop"); a suffix
  that could still grow into one is held back until the next piece decides.
- When the request offers tools, everything from `<tool_call>` on is held until the generation
  ends, then either becomes tool calls or is released as text (see `workers.reframr.tools`).

vLLM applies stop strings to the raw output before its tool parser looks at it; so does this.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from workers.reframr.tools import TOOL_CALL_TAG, ToolCall, parse_tool_calls

_WORDS = re.compile(r"\s*\S+|\s+")


def split_words(text: str) -> list[str]:
    """`text` cut before each word (leading whitespace kept); joins back to `text`."""
    return _WORDS.findall(text)


@dataclass(frozen=True, slots=True)
class Shaped:
    content: str
    """All content of the answer (what the non-stream message carries)."""
    tail: str
    """The part of `content` not yet released by `feed`."""
    tool_calls: list[ToolCall] | None


def _held_suffix(text: str, watched: Sequence[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of a watched string."""
    longest = 0
    for word in watched:
        for k in range(min(len(word) - 1, len(text)), longest, -1):
            if text.endswith(word[:k]):
                longest = k
                break
    return longest


class OutputShaper:
    def __init__(self, stops: Sequence[str], tools: frozenset[str] | None) -> None:
        self._stops = tuple(stop for stop in stops if stop)
        self._tools = tools
        self._watched = self._stops + ((TOOL_CALL_TAG,) if tools is not None else ())
        self._longest_stop = max((len(stop) for stop in self._stops), default=0)
        self._text = ""
        self._released = 0
        self._tool_at: int | None = None
        self.stopped = False
        """A stop sequence was found: the answer is complete, whatever the engine does next."""

    def feed(self, piece: str) -> str:
        """Take the engine's next piece; return the content that can be released now."""
        if self.stopped:
            return ""
        before = len(self._text)
        self._text += piece
        if self._stops:
            self._find_stop(max(self._released, before - self._longest_stop + 1))
        if self._tools is not None and self._tool_at is None:
            at = self._text.find(TOOL_CALL_TAG, max(self._released, before - len(TOOL_CALL_TAG) + 1))
            self._tool_at = None if at < 0 else at
        end = len(self._text) if self._tool_at is None else self._tool_at
        if not self.stopped and self._tool_at is None:
            end -= _held_suffix(self._text[self._released :], self._watched)
        released = self._text[self._released : end]
        self._released = end
        return released

    def _find_stop(self, start: int) -> None:
        hits = [at for at in (self._text.find(stop, start) for stop in self._stops) if at >= 0]
        if not hits:
            return
        self._text = self._text[: min(hits)]
        self.stopped = True
        if self._tool_at is not None and self._tool_at + len(TOOL_CALL_TAG) > len(self._text):
            self._tool_at = None

    def finish(self) -> Shaped:
        """The answer once no more pieces will come."""
        if self._tool_at is not None and self._tools is not None:
            calls = parse_tool_calls(self._text[self._tool_at :], self._tools)
            if calls is not None:
                content = self._text[: self._tool_at]
                return Shaped(content, content[self._released :], calls)
        return Shaped(self._text, self._text[self._released :], None)
