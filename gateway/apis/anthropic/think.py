"""Reasoning a worker wrote into its content as `<think>…</think>` (a model served without a
reasoning parser), told apart from the answer, one fragment at a time.

Only a `<think>` that opens the content (after whitespace) counts: a model that writes the tag
later is talking about it. Once `</think>` closes it, the rest is the answer (its leading
newlines, which only separate the two, dropped). A tag may arrive split over any number of
chunks, so the text that could still be the start of one is held back until the next fragment
says what it is: at most the tag's length less one character.
"""

from __future__ import annotations

import enum

OPEN = "<think>"
CLOSE = "</think>"


class Phase(enum.Enum):
    START = "start"  # nothing but whitespace yet: a `<think>` may still open
    THINKING = "thinking"
    AFTER = "after"  # just closed: newlines before the answer are dropped
    TEXT = "text"


Piece = tuple[bool, str]  # (is thinking, text)
_TEXT = Phase.TEXT


class ThinkSplitter:
    __slots__ = ("_held", "_phase")

    def __init__(self) -> None:
        self._phase = Phase.START
        self._held = ""

    @property
    def phase(self) -> Phase:
        """TEXT once the answer began: from then on every fragment is answer text, held nothing."""
        return self._phase

    def feed(self, text: str) -> list[Piece]:
        if self._phase is _TEXT and text:
            return [(False, text)]  # nothing is held in TEXT: what the loop below returns
        out: list[Piece] = []
        rest = self._held + text
        self._held = ""
        while rest:
            phase = self._phase
            if phase is Phase.TEXT:
                out.append((False, rest))
                break
            if phase is Phase.AFTER:
                rest = rest.lstrip("\r\n")
                if rest:
                    self._phase = Phase.TEXT
                continue
            if phase is Phase.START:
                body = rest.lstrip()
                if body.startswith(OPEN):
                    self._phase = Phase.THINKING
                    rest = body[len(OPEN) :]
                elif OPEN.startswith(body):
                    self._held = rest  # whitespace, or a tag not yet whole
                    break
                else:
                    self._phase = Phase.TEXT
                continue
            at = rest.find(CLOSE)
            if at >= 0:
                if at:
                    out.append((True, rest[:at]))
                self._phase = Phase.AFTER
                rest = rest[at + len(CLOSE) :]
                continue
            keep = _partial_tag(rest, CLOSE)
            if len(rest) > keep:
                out.append((True, rest[: len(rest) - keep]))
            self._held = rest[len(rest) - keep :]
            break
        return out

    def flush(self) -> list[Piece]:
        """What was held back, once no more text will come: it was no tag after all."""
        held, self._held = self._held, ""
        if not held:
            return []
        return [(self._phase is Phase.THINKING, held)]


def _partial_tag(text: str, tag: str) -> int:
    """The length of the longest end of `text` that begins `tag`."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


def split_whole(text: str) -> list[Piece]:
    """A whole answer's content, split as its stream would have been."""
    splitter = ThinkSplitter()
    pieces = splitter.feed(text) + splitter.flush()
    merged: list[Piece] = []
    for thinking, part in pieces:
        if merged and merged[-1][0] == thinking:
            merged[-1] = (thinking, merged[-1][1] + part)
        else:
            merged.append((thinking, part))
    return merged
