from __future__ import annotations

import pytest

from gateway.proxy.sse import SSEParser

VLLM_STREAM = (
    b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"tok0 "}}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
    b"data: [DONE]\n\n"
)


def _feed_in_pieces(stream: bytes, cuts: list[int]) -> list[bytes | None]:
    parser = SSEParser()
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
    parser = SSEParser()
    events = parser.feed(b": keep-alive\n\nevent: message\nid: 7\ndata: a\ndata:b\n\n")
    assert [e.data for e in events] == [None, b"a\nb"]
    assert events[0].raw == b": keep-alive\n\n"


def test_an_unfinished_event_stays_pending() -> None:
    parser = SSEParser()
    assert parser.feed(b'data: {"choices":[]') == []
    assert parser.pending == b'data: {"choices":[]'
