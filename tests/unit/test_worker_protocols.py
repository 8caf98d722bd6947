"""What the gateway reads from a worker's events per protocol (gateway.proxy.worker_protocols): the
end, failures, output that keeps a stream alive, and usage a worker cannot lie its way through."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gateway.errors import ConfigError
from gateway.model_file import parse_model
from gateway.model_table import NATIVE, TRANSLATE
from gateway.proxy import worker_protocols as wp
from gateway.proxy.settlement import Outcome
from gateway.proxy.usage import InvalidUsage, Usage


def _read(protocol: Any, events: list[dict[str, Any]]) -> tuple[Outcome, list[wp.Batch]]:
    reader = protocol.reader()
    outcome = Outcome()
    batches = []
    for chunk in events:
        batch = wp.Batch()
        reader.read(chunk, outcome, batch)
        batches.append(batch)
    return outcome, batches


def _delta(text: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}


MESSAGE_START: dict[str, Any] = {
    "type": "message_start",
    "message": {"usage": {"input_tokens": 7, "output_tokens": 1}},
}


def test_a_messages_stream_is_metered_exactly_mid_way_and_at_its_end() -> None:
    events: list[dict[str, Any]] = [
        MESSAGE_START,
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        _delta("a"),
        _delta("b"),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 2}},
        {"type": "message_stop"},
    ]
    outcome, batches = _read(wp.MESSAGES, events)
    assert [b.output for b in batches] == [False, False, True, True, False, True, True]
    assert batches[3].usage == Usage(7, 2)  # what a client that leaves here is metered with
    assert outcome.usage == Usage(7, 2)
    assert (outcome.finish_reason, outcome.tokens_relayed) == ("max_tokens", 2)
    assert [b.done for b in batches][-1]


def test_messages_usage_that_is_no_count_is_not_believed() -> None:
    lying = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": -5}}
    outcome, _ = _read(wp.MESSAGES, [MESSAGE_START, lying, {"type": "message_stop"}])
    assert outcome.usage is None
    assert outcome.invalid_usage
    with pytest.raises(InvalidUsage):
        wp.MESSAGES.usage({"usage": {"input_tokens": 2**63, "output_tokens": 1}})


def test_a_messages_error_event_ends_the_stream_as_a_failure() -> None:
    outcome, batches = _read(wp.MESSAGES, [MESSAGE_START, {"type": "error", "error": {"message": "boom\n"}}])
    failure = batches[-1].failure
    assert failure is not None
    assert batches[-1].done
    assert "boom" in failure.message
    assert "\n" not in failure.message
    assert outcome.error_reason == "worker_error_event"


def test_pings_and_block_boundaries_are_not_output() -> None:
    _, batches = _read(wp.MESSAGES, [{"type": "ping"}, {"type": "content_block_stop", "index": 0}])
    assert not any(b.output for b in batches)


def test_a_responses_stream_names_its_id_first_and_its_usage_last() -> None:
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1", "usage": None}},
        {"type": "response.output_text.delta", "delta": "x"},
        {
            "type": "response.incomplete",
            "response": {
                "id": "resp_1",
                "incomplete_details": {"reason": "max_output_tokens"},
                "usage": {"input_tokens": 4, "output_tokens": 1},
            },
        },
    ]
    outcome, batches = _read(wp.RESPONSES, events)
    assert batches[0].stored_id == "resp_1"
    assert not batches[0].output
    assert batches[1].output
    assert batches[1].usage is None  # no usage mid-stream: the estimate meters a departure
    assert batches[2].done
    assert outcome.usage == Usage(4, 1)
    assert outcome.finish_reason == "max_output_tokens"


def test_response_failed_is_a_failure() -> None:
    failed = {"type": "response.failed", "response": {"error": {"message": "engine died"}}}
    _, batches = _read(wp.RESPONSES, [failed])
    assert batches[0].failure is not None
    assert "engine died" in batches[0].failure.message


def test_a_stored_id_is_read_from_a_whole_answer_only_where_the_worker_stores() -> None:
    assert wp.RESPONSES.stored_id({"id": "resp_9", "object": "response"}) == "resp_9"
    assert wp.RESPONSES.stored_id({"id": 9}) is None
    assert wp.CHAT.stored_id({"id": "chatcmpl-1"}) is None


@pytest.mark.parametrize(
    ("protocols", "error"),
    [
        ({"messages": "passthrough"}, "models[0].protocols.messages: expected translate or native"),
        ({"chat": NATIVE}, "models[0].protocols.chat: unknown field"),
        ("native", "models[0].protocols: expected a mapping"),
    ],
)
def test_protocols_are_checked_when_the_table_loads(protocols: Any, error: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(error)):
        parse_model({"name": "m", "endpoints": [{"url": "http://w:1"}], "protocols": protocols}, "models[0]")


def test_protocols_default_to_translation() -> None:
    model = parse_model({"name": "m", "endpoints": [{"url": "http://w:1"}]}, "models[0]")
    assert (model.protocols.messages, model.protocols.responses, model.tokenize) == (
        TRANSLATE,
        TRANSLATE,
        False,
    )
    native = parse_model(
        {
            "name": "m",
            "endpoints": [{"url": "http://w:1"}],
            "protocols": {"responses": NATIVE},
            "tokenize": True,
        },
        "models[0]",
    )
    assert native.protocols.native("responses")
    assert not native.protocols.native("messages")
    assert native.tokenize


def test_a_response_id_first_named_at_the_end_is_still_remembered_once() -> None:
    completed = {"type": "response.completed", "response": {"id": "resp_2", "usage": None}}
    _, batches = _read(wp.RESPONSES, [{"type": "response.in_progress"}, completed, completed])
    assert [b.stored_id for b in batches] == [None, "resp_2", None]


def test_an_empty_message_delta_keeps_nothing_alive() -> None:
    _, batches = _read(wp.MESSAGES, [MESSAGE_START, {"type": "message_delta", "delta": {}}])
    assert not batches[1].output
