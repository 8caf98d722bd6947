"""The SSE splitter: the same events whatever the read boundaries, in time and memory linear in
the bytes received, and never holding more than one event's limit."""

from __future__ import annotations

import pytest

from gateway.proxy.sse import SSEParser

CAP = 1024 * 1024

VLLM_STREAM = (
    b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"tok0 "}}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
    b"data: [DONE]\n\n"
)


def _feed_in_pieces(stream: bytes, cuts: list[int]) -> list[bytes | None]:
    parser = SSEParser(CAP)
    datas: list[bytes | None] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        datas.extend(e.data for e in parser.feed(stream[start:cut]))
        start = cut
    assert parser.pending == b""
    return datas


def test_whole_stream_gives_every_event_in_order() -> None:
    datas = _feed_in_pieces(VLLM_STREAM, [])
    assert datas == [
        b'{"choices":[{"delta":{"role":"assistant","content":""}}]}',
        b'{"choices":[{"delta":{"content":"tok0 "}}]}',
        b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}',
        b"[DONE]",
    ]


def test_every_single_cut_point_gives_the_same_events() -> None:
    expected = _feed_in_pieces(VLLM_STREAM, [])
    for cut in range(1, len(VLLM_STREAM)):
        assert _feed_in_pieces(VLLM_STREAM, [cut]) == expected, f"cut at byte {cut}"


def test_byte_by_byte_delivery_gives_the_same_events() -> None:
    expected = _feed_in_pieces(VLLM_STREAM, [])
    assert _feed_in_pieces(VLLM_STREAM, list(range(1, len(VLLM_STREAM)))) == expected


@pytest.mark.parametrize("newline", [b"\r\n", b"\r"])
def test_crlf_and_cr_line_ends_split_like_lf(newline: bytes) -> None:
    stream = VLLM_STREAM.replace(b"\n", newline)
    expected = _feed_in_pieces(VLLM_STREAM, [])
    for cut in range(1, len(stream)):
        assert _feed_in_pieces(stream, [cut]) == expected, f"cut at byte {cut}"


def test_multiline_data_comments_and_other_fields() -> None:
    parser = SSEParser(CAP)
    events = parser.feed(b": keep-alive\n\nevent: message\nid: 7\ndata: a\ndata:b\n\n")
    assert [e.data for e in events] == [None, b"a\nb"]
    assert events[0].raw == b": keep-alive\n\n"


def test_an_unfinished_event_stays_pending() -> None:
    parser = SSEParser(CAP)
    assert parser.feed(b'data: {"choices":[]') == []
    assert parser.pending == b'data: {"choices":[]'


def test_a_blank_line_cut_between_two_reads_ends_the_pending_event() -> None:
    parser = SSEParser(CAP)
    assert parser.feed(b"data: a\n") == []
    assert parser.feed(b"data: b\n") == []
    events = parser.feed(b"\ndata: c\n\n")
    assert [e.data for e in events] == [b"a\nb", b"c"]
    assert events[0].raw == b"data: a\ndata: b\n\n"
    assert parser.pending == b""


def test_a_crlf_cut_between_two_reads_inside_a_pending_event() -> None:
    parser = SSEParser(CAP)
    assert parser.feed(b"data: a") == []
    assert parser.feed(b"bc\r") == []
    assert [e.raw for e in parser.feed(b"\n\r")] == [b"data: abc\n\n"]  # `\r\n` then `\r`
    assert parser.feed(b"\ndata: d\r") == []  # that `\r`'s `\n`, not a blank line
    events = parser.feed(b"\n\r\n")
    assert [e.raw for e in events] == [b"data: d\n\n"]
    assert [e.data for e in events] == [b"d"]
    assert parser.pending == b""


def test_a_line_far_over_the_limit_is_refused_at_the_limit_holding_no_more() -> None:
    piece = b"x" * 65536
    parser = SSEParser(CAP)
    fed = 0
    assert parser.feed(b"data: ") == []
    fed += 6
    while not parser.too_large and fed < 100 * 1024 * 1024:  # a 100 MB line with no end
        assert parser.feed(piece) == []
        fed += len(piece)
        assert parser.pending_size <= CAP, f"the parser holds {parser.pending_size} bytes of one event"
    assert parser.too_large, "a 100 MB line was held whole"
    assert CAP < fed <= CAP + len(piece), f"the limit was noticed after {fed} bytes, not at {CAP}"
    assert parser.pending_size == 0, "what was held is not let go once the stream is over the limit"
    assert parser.feed(b"\n\ndata: [DONE]\n\n") == [], "events after the oversized one were parsed"


def test_a_long_event_in_many_reads_is_joined_once_and_whole() -> None:
    # Linear in the bytes: 16 MB in 4 KB reads is 4096 pieces kept as they came, not a buffer
    # re-joined and re-scanned 4096 times (which was 32 GB of copying).
    body = b"y" * (16 * 1024 * 1024)
    parser = SSEParser(32 * 1024 * 1024)
    stream = b"data: " + body + b"\n\ndata: [DONE]\n\n"
    events = []
    for at in range(0, len(stream), 4096):
        events.extend(parser.feed(stream[at : at + 4096]))
    assert [len(e.data or b"") for e in events] == [len(body), 6]
    assert events[0].data == body


def test_an_event_of_exactly_the_limit_passes_and_one_byte_more_does_not() -> None:
    exact = b"data: " + b"z" * (100 - 8) + b"\n\n"
    assert len(exact) == 100
    parser = SSEParser(100)
    assert [e.raw for e in parser.feed(exact + exact)] == [exact, exact]
    assert not parser.too_large

    over = b"data: " + b"z" * (100 - 7) + b"\n\n"
    parser = SSEParser(100)
    events = parser.feed(exact + over + exact)
    assert [e.raw for e in events] == [exact], "the events before the oversized one are kept"
    assert parser.too_large


def test_an_event_over_the_limit_across_reads_is_refused() -> None:
    over = b"data: " + b"z" * (100 - 7) + b"\n\n"
    for cut in range(1, len(over)):
        parser = SSEParser(100)
        events = parser.feed(over[:cut]) + parser.feed(over[cut:])
        assert events == [], f"cut at {cut}"
        assert parser.too_large, f"cut at {cut}"
