"""Stop sequences and tool-call holdback on text that arrives in arbitrary pieces."""

from __future__ import annotations

import pytest

from workers.reframr.output import OutputShaper, split_words

pytestmark = pytest.mark.timeout(10)


def run(shaper: OutputShaper, pieces: list[str]) -> list[str]:
    released = []
    for piece in pieces:
        released.append(shaper.feed(piece))
        if shaper.stopped:
            break
    return released


def test_without_stops_everything_is_released_at_once() -> None:
    shaper = OutputShaper((), None)
    assert run(shaper, ["a", " b", " <tool_call> x {}"]) == ["a", " b", " <tool_call> x {}"]
    done = shaper.finish()
    assert (done.content, done.tail, done.tool_calls) == ("a b <tool_call> x {}", "", None)


def test_a_stop_split_across_pieces_is_never_partly_released() -> None:
    shaper = OutputShaper(("STOP",), None)
    assert run(shaper, ["one ST", "O", "P two"]) == ["one ", "", ""]
    assert shaper.stopped
    assert shaper.finish().content == "one "


def test_held_text_that_is_not_a_stop_is_released_later() -> None:
    shaper = OutputShaper(("STOP",), None)
    assert run(shaper, ["one ST", "ART"]) == ["one ", "START"]
    assert not shaper.stopped
    done = shaper.finish()
    assert (done.content, done.tail) == ("one START", "")


def test_a_held_suffix_is_in_the_tail_when_the_engine_ends() -> None:
    shaper = OutputShaper(("STOP",), None)
    assert run(shaper, ["one ST"]) == ["one "]
    assert shaper.finish().tail == "ST"


def test_the_earliest_stop_wins() -> None:
    shaper = OutputShaper(("c d", "b"), None)
    assert run(shaper, ["a b c d"]) == ["a "]
    assert shaper.finish().content == "a "


def test_text_before_a_tool_call_is_released_and_the_call_held() -> None:
    shaper = OutputShaper((), frozenset({"f"}))
    assert run(shaper, ["Let me check. <tool", "_call> f", ' {"a":', " 1}"]) == ["Let me check. ", "", "", ""]
    done = shaper.finish()
    assert done.content == "Let me check. "
    assert done.tail == ""
    assert done.tool_calls is not None
    assert [(c.name, c.arguments) for c in done.tool_calls] == [("f", '{"a": 1}')]


def test_a_refused_call_is_released_as_text_at_the_end() -> None:
    shaper = OutputShaper((), frozenset({"f"}))
    assert run(shaper, ["<tool_call> g", " {}"]) == ["", ""]
    done = shaper.finish()
    assert (done.content, done.tail, done.tool_calls) == ("<tool_call> g {}", "<tool_call> g {}", None)


def test_a_stop_inside_a_call_truncates_it_to_text() -> None:
    shaper = OutputShaper(("}",), frozenset({"f"}))
    assert run(shaper, ['<tool_call> f {"a": 1', "} more"]) == ["", ""]
    done = shaper.finish()
    assert (done.content, done.tool_calls) == ('<tool_call> f {"a": 1', None)


def test_split_words_joins_back() -> None:
    for text in ("", " ", "a", " a  b\n c ", '{"city": "Paris"}'):
        assert "".join(split_words(text)) == text
    assert split_words(" a  b ") == [" a", "  b", " "]
