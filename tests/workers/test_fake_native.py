"""The fake worker's native dialects (Anthropic Messages, OpenAI Responses and its store, vLLM's
/tokenize), framed as a real vLLM 0.32.0 frames them, over a real loopback socket."""

from __future__ import annotations

import http.client
import logging
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tests.servers import run_uvicorn
from tests.workers.test_fake_worker import OpenStream, _connect, _send, assert_held_then_left, call, record_of
from workers.fake import create_app
from workers.fake.aborts import HideInjectedAborts

MODEL = "fake-model"
SYSTEM = [{"type": "text", "text": "be brief"}]  # 2 words
USER = {"role": "user", "content": "hello there"}  # 2 words

pytestmark = pytest.mark.timeout(10)


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with run_uvicorn(create_app([MODEL], max_model_len=4096)) as url:
        log_filter = HideInjectedAborts()
        logging.getLogger("uvicorn.error").addFilter(log_filter)
        try:
            yield url
        finally:
            logging.getLogger("uvicorn.error").removeFilter(log_filter)


def named_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(name, data) of every `event: <name>\\ndata: <json>\\n\\n` event of a complete body."""
    blocks = raw.split(b"\n\n")
    assert blocks.pop() == b"", raw[-60:]
    events = []
    for block in blocks:
        name, data = block.split(b"\n")
        assert name.startswith(b"event: ")
        assert data.startswith(b"data: ")
        payload = orjson.loads(data[len(b"data: ") :])
        assert payload["type"] == name[len(b"event: ") :].decode()
        events.append((payload["type"], payload))
    return events


def post_json(base_url: str, path: str, body: Any, **headers: str) -> tuple[int, dict[str, str], Any]:
    status, got, raw = call(base_url, "POST", path, body, headers)
    return status, got, orjson.loads(raw)


def message_body(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 16, "system": SYSTEM, "messages": [USER], **extra}


# --- Anthropic Messages -------------------------------------------------------------------------


def test_message_answer_is_vllms(base_url: str) -> None:
    status, headers, raw = call(
        base_url, "POST", "/v1/messages", message_body(), {"x-fake-tokens": "3", "x-request-id": "msg-1"}
    )
    assert status == 200
    assert headers["x-request-id"] == "msg-1"
    answer = orjson.loads(raw)
    assert answer["id"].startswith("chatcmpl-")
    # vLLM's fields, in its order; a null stop_sequence is left out.
    assert raw == orjson.dumps(
        {
            "id": answer["id"],
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": "tok0 tok1 tok2 "}],
            "model": MODEL,
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 4, "output_tokens": 3},
        }
    )
    assert record_of(base_url, "msg-1")["state"] == "completed"


def test_message_max_tokens_caps_and_blocks_count(base_url: str) -> None:
    messages = [
        USER,
        {"role": "assistant", "content": [{"type": "text", "text": "one two three"}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "sun"}]},
            ],
        },
    ]
    status, _, answer = post_json(base_url, "/v1/messages", message_body(max_tokens=2, messages=messages))
    assert status == 200
    assert answer["stop_reason"] == "max_tokens"
    assert answer["usage"] == {"input_tokens": 2 + 2 + 3 + 1, "output_tokens": 2}


def test_message_stream_is_vllms(base_url: str) -> None:
    status, headers, raw = call(
        base_url, "POST", "/v1/messages", message_body(stream=True), {"x-fake-tokens": "2"}
    )
    assert status == 200
    assert headers["content-type"] == "text/event-stream; charset=utf-8"
    assert "content-length" not in headers
    events = named_events(raw)
    message_id = events[0][1]["message"]["id"]
    expected: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": MODEL,
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 4, "output_tokens": 0},
            },
        },
        {"type": "content_block_start", "content_block": {"type": "text", "text": ""}, "index": 0},
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "tok0 "}, "index": 0},
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "tok1 "}, "index": 0},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"input_tokens": 4, "output_tokens": 2},
        },
        {"type": "message_stop"},
    ]
    wire = b"".join(
        b"event: " + str(e["type"]).encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in expected
    )
    assert raw == wire


def test_an_empty_message_stream_has_no_content_block(base_url: str) -> None:
    _, _, raw = call(base_url, "POST", "/v1/messages", message_body(stream=True), {"x-fake-tokens": "0"})
    assert [name for name, _ in named_events(raw)] == ["message_start", "message_delta", "message_stop"]


def test_message_errors_have_vllms_shapes(base_url: str) -> None:
    status, _, body = post_json(base_url, "/v1/messages", message_body(model="nope"))
    assert (status, body) == (
        404,
        {"type": "error", "error": {"type": "NotFoundError", "message": "The model `nope` does not exist."}},
    )
    # Request validation answers in the OpenAI envelope, as vLLM's framework does.
    no_cap = {k: v for k, v in message_body().items() if k != "max_tokens"}
    status, _, body = post_json(base_url, "/v1/messages", no_cap)
    assert status == 400
    assert body["error"]["type"] == "Bad Request"
    assert body["error"]["param"] == "body.max_tokens"
    status, _, raw = call(base_url, "POST", "/v1/messages", b'{"model": ')
    assert status == 400
    assert orjson.loads(raw)["error"]["code"] == 400
    status, headers, body = post_json(base_url, "/v1/messages", message_body(), **{"x-fake-status": "429"})
    assert status == 429
    assert headers["retry-after"] == "1"
    assert body["error"]["type"] == "RateLimitError"


def test_message_error_event_ends_the_stream(base_url: str) -> None:
    headers = {"x-fake-tokens": "5", "x-fake-error-event-after": "2", "x-request-id": "msg-err"}
    status, _, raw = call(base_url, "POST", "/v1/messages", message_body(stream=True), headers)
    assert status == 200
    events = named_events(raw)
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "error",
    ]
    assert events[-1][1]["error"]["type"] == "internal_error"
    assert record_of(base_url, "msg-err")["state"] == "failed"


def test_message_fail_after_drops_the_connection(base_url: str) -> None:
    conn = _connect(base_url)
    try:
        _send(conn, "POST", "/v1/messages", message_body(stream=True), {"x-fake-fail-after": "1"})
        response = conn.getresponse()
        with pytest.raises(http.client.IncompleteRead) as broken:
            response.read()
        assert b"tok0 " in broken.value.partial
        assert b"message_stop" not in broken.value.partial
    finally:
        conn.close()


def test_message_stream_holds_after_n_tokens_until_the_client_leaves(base_url: str) -> None:
    headers = {"x-fake-tokens": "5", "x-fake-hold-after": "1", "x-request-id": "native-hold"}
    with OpenStream(base_url, "/v1/messages", message_body(stream=True), headers) as stream:
        names = []
        while "content_block_delta" not in names:  # the opening events, then one token
            event = stream.next_event()[1]  # its lines, joined: b"event: NAME" b"data: {...}"
            names.append(orjson.loads(event.split(b"data: ", 1)[1])["type"])
        assert_held_then_left(base_url, "native-hold", 1, stream)


def test_count_tokens(base_url: str) -> None:
    body = {k: v for k, v in message_body().items() if k != "max_tokens"}
    status, _, answer = post_json(base_url, "/v1/messages/count_tokens", body)
    assert (status, answer) == (200, {"input_tokens": 4, "context_management": {"original_input_tokens": 4}})


# --- OpenAI Responses ---------------------------------------------------------------------------


def response_body(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "instructions": "be brief", "input": "hello there", **extra}


def test_response_answer_is_vllms(base_url: str) -> None:
    status, headers, answer = post_json(
        base_url, "/v1/responses", response_body(max_output_tokens=3), **{"x-request-id": "rsp-1"}
    )
    assert status == 200
    assert headers["x-request-id"] == "rsp-1"
    assert answer["id"].startswith("resp_")
    assert (answer["object"], answer["model"], answer["status"]) == ("response", MODEL, "incomplete")
    assert answer["incomplete_details"] == {"reason": "max_output_tokens"}
    (item,) = answer["output"]
    assert item["type"] == "message"
    assert item["content"] == [
        {"annotations": [], "text": "tok0 tok1 tok2 ", "type": "output_text", "logprobs": None}
    ]
    usage = answer["usage"]
    assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (4, 3, 7)
    assert usage["input_tokens_details"]["cached_tokens"] == 0
    assert usage["output_tokens_details"]["reasoning_tokens"] == 0
    assert record_of(base_url, "rsp-1")["state"] == "completed"
    status, _, done = post_json(base_url, "/v1/responses", response_body(), **{"x-fake-tokens": "2"})
    assert (done["status"], done["incomplete_details"]) == ("completed", None)


def test_response_stream_is_vllms(base_url: str) -> None:
    status, headers, raw = call(
        base_url, "POST", "/v1/responses", response_body(stream=True), {"x-fake-tokens": "2"}
    )
    assert status == 200
    assert headers["content-type"] == "text/event-stream; charset=utf-8"
    events = named_events(raw)
    assert [name for name, _ in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [data["sequence_number"] for _, data in events] == list(range(10))
    # Event fields in alphabetical order, as vLLM dumps OpenAI's models.
    assert all(list(data) == sorted(data) for _, data in events)
    created, final = events[0][1]["response"], events[-1][1]["response"]
    assert (created["status"], created["usage"], created["output"]) == ("in_progress", None, [])
    assert final["id"] == created["id"]
    assert final["usage"]["input_tokens"] == 4
    assert final["usage"]["output_tokens"] == 2
    assert events[6][1]["text"] == "tok0 tok1 "
    # Stored once finished.
    assert post_json(base_url, "/v1/responses", response_body(previous_response_id=final["id"]))[0] == 200


def test_capped_stream_ends_with_completed_as_vllms_does(base_url: str) -> None:
    _, _, raw = call(base_url, "POST", "/v1/responses", response_body(stream=True, max_output_tokens=1))
    name, data = named_events(raw)[-1]
    assert name == "response.completed"
    assert data["response"]["status"] == "incomplete"


def test_response_error_event_ends_the_stream_unstored(base_url: str) -> None:
    headers = {"x-fake-error-event-after": "1"}
    _, _, raw = call(base_url, "POST", "/v1/responses", response_body(stream=True), headers)
    events = named_events(raw)
    name, error = events[-1]
    assert name == "error"
    assert list(error) == ["code", "message", "param", "sequence_number", "type"]
    assert error["sequence_number"] == len(events) - 1
    response_id = events[0][1]["response"]["id"]
    assert call(base_url, "GET", f"/v1/responses/{response_id}")[0] == 404


def test_stored_response_routes(base_url: str) -> None:
    item = {"role": "user", "content": "one two"}
    status, _, made = post_json(base_url, "/v1/responses", response_body(input=[item]))
    assert status == 200
    path = f"/v1/responses/{made['id']}"
    status, _, raw = call(base_url, "GET", path)
    assert (status, orjson.loads(raw)) == (200, made)
    status, _, raw = call(base_url, "GET", f"{path}/input_items")
    listed = orjson.loads(raw)
    (only,) = listed["data"]
    assert only["id"].startswith("msg_")
    assert (only["type"], only["role"], only["content"]) == (
        "message",
        "user",
        [{"type": "input_text", "text": "one two"}],
    )
    assert listed == {
        "object": "list",
        "data": [only],
        "first_id": only["id"],
        "last_id": only["id"],
        "has_more": False,
    }
    status, _, raw = call(base_url, "POST", f"{path}/cancel")
    assert (status, orjson.loads(raw)) == (
        400,
        {
            "error": {
                "message": "Cannot cancel a synchronous response.",
                "type": "invalid_request_error",
                "param": "response_id",
                "code": 400,
            }
        },
    )
    status, _, raw = call(base_url, "DELETE", path)
    assert (status, orjson.loads(raw)) == (200, {"id": made["id"], "object": "response", "deleted": True})
    for method, suffix in (("GET", ""), ("DELETE", ""), ("POST", "/cancel"), ("GET", "/input_items")):
        status, _, raw = call(base_url, method, path + suffix)
        assert status == 404, (method, suffix)
        assert orjson.loads(raw)["error"] == {
            "message": f"Response with id '{made['id']}' not found.",
            "type": "invalid_request_error",
            "param": "response_id",
            "code": 404,
        }


def test_input_items_pages(base_url: str) -> None:
    items = [{"role": "user", "content": f"word{i}"} for i in range(3)]
    _, _, made = post_json(base_url, "/v1/responses", response_body(input=items))
    path = f"/v1/responses/{made['id']}/input_items"
    _, _, raw = call(base_url, "GET", f"{path}?limit=2")
    page = orjson.loads(raw)
    assert [i["content"][0]["text"] for i in page["data"]] == ["word2", "word1"]  # newest first
    assert page["has_more"] is True
    _, _, raw = call(base_url, "GET", f"{path}?order=asc&after={page['data'][0]['id']}")
    assert [i["content"][0]["text"] for i in orjson.loads(raw)["data"]] == []
    _, _, raw = call(base_url, "GET", f"{path}?order=asc")
    assert [i["content"][0]["text"] for i in orjson.loads(raw)["data"]] == ["word0", "word1", "word2"]


def test_previous_response_id_counts_the_conversation(base_url: str) -> None:
    _, _, first = post_json(base_url, "/v1/responses", response_body(), **{"x-fake-tokens": "3"})
    items = [{"type": "function_call_output", "call_id": "c1", "output": "sunny and warm"}]
    body = {"model": MODEL, "input": items, "previous_response_id": first["id"]}
    status, _, second = post_json(base_url, "/v1/responses", body)
    assert status == 200
    assert second["previous_response_id"] == first["id"]
    assert second["usage"]["input_tokens"] == 4 + 3 + 3
    status, _, body = post_json(base_url, "/v1/responses", {**body, "previous_response_id": "resp_nope"})
    assert status == 404
    assert body["error"]["param"] == "response_id"


def test_store_false_is_not_stored(base_url: str) -> None:
    _, _, made = post_json(base_url, "/v1/responses", response_body(store=False))
    assert call(base_url, "GET", f"/v1/responses/{made['id']}")[0] == 404


def test_two_workers_share_no_store(base_url: str) -> None:
    _, _, made = post_json(base_url, "/v1/responses", response_body())
    with run_uvicorn(create_app([MODEL])) as other:
        assert call(other, "GET", f"/v1/responses/{made['id']}")[0] == 404
        status, _, _ = post_json(other, "/v1/responses", response_body(previous_response_id=made["id"]))
        assert status == 404
    assert call(base_url, "GET", f"/v1/responses/{made['id']}")[0] == 200


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (response_body(model="nope"), 404, "model"),
        (response_body(input=5), 400, "body.input"),
        (response_body(max_output_tokens=-1), 400, "max_tokens"),
        (response_body(max_output_tokens="ten"), 400, "body.max_output_tokens"),
        (response_body(background=True), 400, "background"),
    ],
)
def test_response_errors(base_url: str, body: dict[str, Any], status: int, param: str) -> None:
    got, _, answer = post_json(base_url, "/v1/responses", body)
    assert got == status
    assert answer["error"]["param"] == param
    assert answer["error"]["code"] == status


def test_stored_routes_honour_fake_status(base_url: str) -> None:
    status, headers, _ = call(base_url, "GET", "/v1/responses/resp_x", headers={"x-fake-status": "503"})
    assert (status, headers["retry-after"]) == (503, "1")


# --- /tokenize ----------------------------------------------------------------------------------


def test_tokenize_counts_as_chat_and_completions_do(base_url: str) -> None:
    messages = [{"role": "system", "content": "be brief"}, USER]
    _, _, chat = post_json(base_url, "/v1/chat/completions", {"model": MODEL, "messages": messages})
    status, _, counted = post_json(base_url, "/tokenize", {"model": MODEL, "messages": messages})
    assert status == 200
    assert counted["count"] == chat["usage"]["prompt_tokens"] == 4
    assert len(counted["tokens"]) == 4
    assert (counted["max_model_len"], counted["token_strs"]) == (4096, None)
    _, _, counted = post_json(base_url, "/tokenize", {"prompt": "one two three"})
    assert counted["count"] == 3


def test_tokenize_errors(base_url: str) -> None:
    status, _, body = post_json(base_url, "/tokenize", {"model": "nope", "prompt": "x"})
    assert (status, body["error"]["type"]) == (404, "NotFoundError")
    status, _, body = post_json(base_url, "/tokenize", {"model": MODEL})
    assert (status, body["error"]["param"]) == (400, "body.prompt")
