"""RSP rules (optional, `--worker-responses`; the store rules with `--worker-responses-store`):
OpenAI Responses served by the worker itself, which the gateway forwards as they are on a native
pool, meters from the terminal event's usage, and routes by response id to the worker that made
the response (a stored response lives only there)."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest

from workers.conformance import client
from workers.conformance.checks import error_envelope, is_int, named_event_stream
from workers.conformance.client import JSONObject, Worker
from workers.conformance.conftest import SHORT_TOKENS, capability
from workers.conformance.rules import rule, should

RESPONSES_PATH = "/v1/responses"
TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def responses_body(model: str, **extra: Any) -> JSONObject:
    return {
        "model": model,
        "instructions": "You are terse.",
        "input": "Say hello to the conformance suite, please.",
        "max_output_tokens": SHORT_TOKENS,
        "temperature": 0,
        **extra,
    }


class _Exchanges(client.Exchanges):
    def whole_json(self) -> JSONObject:
        reply = self.whole()
        rule("RSP-1", reply.status == 200, f"expected 200 to a valid Responses request, saw {reply.brief()}")
        body: JSONObject = reply.json()
        return body


@pytest.fixture(scope="session")
def _responses(worker: Worker) -> _Exchanges:
    return _Exchanges(worker, RESPONSES_PATH, responses_body)


@pytest.fixture
def responses(pytestconfig: pytest.Config, _responses: _Exchanges) -> _Exchanges:
    capability(pytestconfig, "--worker-responses", "OpenAI Responses")
    return _responses


@pytest.fixture
def stored(pytestconfig: pytest.Config, responses: _Exchanges) -> _Exchanges:
    capability(pytestconfig, "--worker-responses-store", "stored OpenAI Responses")
    return responses


def response_usage(rule_id: str, response: Any, context: str) -> dict[str, int]:
    usage = response.get("usage") if isinstance(response, dict) else None
    names = ("input_tokens", "output_tokens", "total_tokens")
    rule(
        rule_id,
        isinstance(usage, dict) and all(is_int(usage.get(n)) and usage[n] >= 0 for n in names),
        f"{context}: expected usage with integer {names}, saw {usage!r}",
    )
    assert isinstance(usage, dict)
    rule(rule_id, usage["input_tokens"] >= 1, f"{context}: expected input_tokens >= 1, saw {usage}")
    rule(
        rule_id,
        usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"],
        f"{context}: expected total_tokens = input_tokens + output_tokens, saw {usage}",
    )
    return {n: usage[n] for n in names}


def output_text(response: JSONObject) -> str | None:
    """The text of the response's message items; None when `output` is not the right shape."""
    output = response.get("output")
    if not isinstance(output, list):
        return None
    texts = []
    for item in output:
        if not isinstance(item, dict):
            return None
        if item.get("type") != "message":
            continue
        content = item.get("content")
        if not isinstance(content, list):
            return None
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("text"), str):
                return None
            if part.get("type") == "output_text":
                texts.append(part["text"])
    return "".join(texts)


def check_response(rule_id: str, response: Any, model: str, context: str) -> dict[str, int]:
    """A finished response object (RSP-1's shape) under `rule_id`; returns its usage."""
    rule(rule_id, isinstance(response, dict), f"{context}: expected a response object, saw {response!r}")
    rule(
        rule_id, response.get("object") == "response", f'{context}: expected "object": "response": {response}'
    )
    rule(rule_id, isinstance(response.get("id"), str) and response["id"], f"{context}: expected a string id")
    rule(rule_id, is_int(response.get("created_at")), f"{context}: expected an integer created_at")
    rule(
        "REQ-1",
        response.get("model") == model,
        f"{context}: expected model {model!r}, saw {response.get('model')!r}",
    )
    status = response.get("status")
    rule(
        rule_id, status in ("completed", "incomplete"), f"{context}: expected status completed or incomplete"
    )
    rule(
        rule_id,
        output_text(response) is not None,
        f"{context}: expected output: items, message items with a list of parts with string text, "
        f"saw {response.get('output')!r}",
    )
    usage = response_usage(rule_id, response, context)
    rule(
        rule_id,
        usage["output_tokens"] <= SHORT_TOKENS,
        f"{context}: expected output_tokens <= max_output_tokens {SHORT_TOKENS}, saw {usage}",
    )
    if status == "incomplete":
        details = response.get("incomplete_details")
        rule(
            rule_id,
            isinstance(details, dict) and details.get("reason") == "max_output_tokens",
            f'{context}: expected status "incomplete" with incomplete_details.reason "max_output_tokens", '
            f"saw {details!r}",
        )
        rule(
            rule_id,
            usage["output_tokens"] == SHORT_TOKENS,
            f"{context}: expected an incomplete response to have exactly {SHORT_TOKENS} output tokens, "
            f"saw {usage}",
        )
    return usage


@pytest.mark.rules("RSP-1", "REQ-1")
def test_response_answer(worker: Worker, responses: _Exchanges) -> None:
    reply = responses.whole()
    content_type = reply.headers.get("content-type", "")
    rule("RSP-1", content_type.startswith("application/json"), f"expected JSON, saw {content_type!r}")
    check_response("RSP-1", responses.whole_json(), worker.model, "a Responses answer")


@pytest.mark.rules("RSP-2")
def test_response_stream_framing(responses: _Exchanges) -> None:
    stream = responses.stream()
    where = "a streamed Responses request"
    named_event_stream("RSP-2", stream, where)
    numbers: list[Any] = [data.get("sequence_number") for _, data in stream.events]
    rule(
        "RSP-2",
        all(is_int(n) for n in numbers) and all(a < b for a, b in itertools.pairwise(numbers)),
        f"{where}: expected an increasing integer sequence_number on every event, saw {numbers}",
    )
    names = stream.names
    rule("RSP-2", names[:1] == ["response.created"], f"{where}: expected response.created first, saw {names}")
    terminal = [name for name in names if name in TERMINAL]
    rule(
        "RSP-2",
        len(terminal) == 1 and names[-1] in TERMINAL,
        f"{where}: expected exactly one terminal event {TERMINAL}, the last (the body ending there), "
        f"saw {names}",
    )


@pytest.mark.rules("RSP-3", "REQ-1")
def test_response_stream_content(worker: Worker, responses: _Exchanges) -> None:
    stream, where = responses.stream(), "a streamed Responses request"
    rule("RSP-3", stream.events, f"{where}: expected events, saw {stream.reply.brief()}")
    created = stream.events[0][1].get("response")
    response_id = created.get("id") if isinstance(created, dict) else None
    rule(
        "RSP-3",
        isinstance(response_id, str) and response_id,
        f"{where}: expected response.created to carry response.id, saw {stream.events[0][1]}",
    )
    ids = {data["response"].get("id") for _, data in stream.events if isinstance(data.get("response"), dict)}
    rule("RSP-3", ids == {response_id}, f"{where}: expected every response object to have id {response_id!r}")
    name, last = stream.events[-1]
    rule("RSP-3", name in TERMINAL, f"{where}: expected a terminal event last, saw {name!r}")
    final = last.get("response")
    usage = check_response("RSP-3", final, worker.model, f"{where}, its {name} event")
    assert isinstance(final, dict)
    deltas = "".join(str(data.get("delta", "")) for data in stream.of("response.output_text.delta"))
    rule(
        "RSP-3",
        deltas == output_text(final),
        f"{where}: expected the output_text deltas {deltas!r} to make the final output text "
        f"{output_text(final)!r}",
    )
    expected = response_usage("RSP-1", responses.whole_json(), "a Responses answer")["input_tokens"]
    rule(
        "RSP-3",
        usage["input_tokens"] == expected,
        f"{where}: expected the input_tokens of the same request unstreamed ({expected}), saw {usage}",
    )


def _unknown_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


@pytest.mark.rules("RSP-4")
def test_response_errors(worker: Worker, responses: _Exchanges) -> None:
    unknown = responses_body(f"no-such-model-{uuid.uuid4().hex[:8]}")
    cases: list[tuple[str, JSONObject | bytes, int]] = [
        ("an unknown model", unknown, 404),
        ("an unknown model, streamed", {**unknown, "stream": True}, 404),
        ("input not a string or a list", responses_body(worker.model, input=5), 400),
        ("max_output_tokens -1", responses_body(worker.model, max_output_tokens=-1), 400),
        ("a body that is not JSON", b'{"model": "x", "input": [', 400),
    ]
    for what, body, status in cases:
        reply = client.post(worker, RESPONSES_PATH, body)
        rule(
            "RSP-4",
            reply.status == status
            and not reply.headers.get("content-type", "").startswith("text/event-stream"),
            f"{RESPONSES_PATH} with {what}: expected HTTP {status} with a JSON body, saw {reply.brief()}",
        )
        error_envelope(reply, f"{RESPONSES_PATH} with {what}", "RSP-4")


@pytest.mark.rules("RSP-7")
def test_unknown_response_ids_are_404(worker: Worker, responses: _Exchanges) -> None:
    unknown = _unknown_id()
    replies = {
        f"GET {RESPONSES_PATH}/{unknown}": client.get(worker, f"{RESPONSES_PATH}/{unknown}"),
        f"POST {RESPONSES_PATH}/{unknown}/cancel": client.post(
            worker, f"{RESPONSES_PATH}/{unknown}/cancel", b""
        ),
        "previous_response_id of an unknown id": client.post(
            worker, RESPONSES_PATH, responses_body(worker.model, previous_response_id=unknown)
        ),
    }
    for what, reply in replies.items():
        rule("RSP-7", reply.status == 404, f"{what}: expected 404, saw {reply.brief()}")
        error_envelope(reply, what, "RSP-7")


@pytest.mark.rules("RSP-5", "RSP-7")
def test_a_stored_response_is_answered_again(worker: Worker, stored: _Exchanges) -> None:
    made = stored.whole_json()
    reply = client.get(worker, f"{RESPONSES_PATH}/{made['id']}")
    where = f"GET {RESPONSES_PATH}/{{id}} of a response just made"
    rule("RSP-5", reply.status == 200, f"{where}: expected 200, saw {reply.brief()}")
    again = reply.json()
    same = ("id", "status", "output", "usage")
    rule(
        "RSP-5",
        {k: again.get(k) for k in same} == {k: made.get(k) for k in same},
        f"{where}: expected the same {same} as the answer, saw {reply.brief()}",
    )
    created = stored.stream().events[0][1].get("response") if stored.stream().events else None
    if isinstance(created, dict) and isinstance(created.get("id"), str):
        reply = client.get(worker, f"{RESPONSES_PATH}/{created['id']}")
        rule("RSP-5", reply.status == 200, f"GET of a streamed response: expected 200, saw {reply.brief()}")
        check_response("RSP-5", reply.json(), worker.model, "GET of a streamed response")
    unstored = client.post(worker, RESPONSES_PATH, responses_body(worker.model, store=False))
    rule("RSP-1", unstored.status == 200, f'"store": false: expected 200, saw {unstored.brief()}')
    reply = client.get(worker, f"{RESPONSES_PATH}/{unstored.json()['id']}")
    rule(
        "RSP-7",
        reply.status == 404,
        f'GET of a response made with "store": false: expected 404, saw {reply.brief()}',
    )
    error_envelope(reply, 'GET of a response made with "store": false', "RSP-7")


@pytest.mark.rules("RSP-6")
def test_previous_response_id_continues_it(worker: Worker, stored: _Exchanges) -> None:
    made = stored.whole_json()
    before = response_usage("RSP-1", made, "a Responses answer")
    body = responses_body(worker.model, input="And once more.", previous_response_id=made["id"])
    body.pop("instructions")
    reply = client.post(worker, RESPONSES_PATH, body)
    where = "a response continuing a stored one (previous_response_id)"
    rule("RSP-6", reply.status == 200, f"{where}: expected 200, saw {reply.brief()}")
    usage = check_response("RSP-6", reply.json(), worker.model, where)
    rule(
        "RSP-6",
        usage["input_tokens"] > before["input_tokens"],
        f"{where}: expected more input tokens than the stored response's {before['input_tokens']} "
        f"(its conversation is the prompt), saw {usage}",
    )


@pytest.mark.rules("RSP-8")
def test_cancelling_a_finished_response(worker: Worker, stored: _Exchanges) -> None:
    made = stored.whole_json()
    reply = client.post(worker, f"{RESPONSES_PATH}/{made['id']}/cancel", b"")
    where = f"POST {RESPONSES_PATH}/{{id}}/cancel of a finished response"
    rule("RSP-8", reply.status in (200, 400), f"{where}: expected 400 (or 200), saw {reply.brief()}")
    if reply.status == 400:
        error_envelope(reply, where, "RSP-8")
    else:
        rule(
            "RSP-8",
            reply.json().get("id") == made["id"],
            f"{where}: expected the response, saw {reply.brief()}",
        )


@pytest.mark.rules("RSP-9")
def test_delete_removes_a_stored_response(worker: Worker, stored: _Exchanges) -> None:
    made = client.post(worker, RESPONSES_PATH, responses_body(worker.model))
    rule("RSP-1", made.status == 200, f"expected 200 to a valid Responses request, saw {made.brief()}")
    response_id = made.json()["id"]
    reply = client.call(worker, "DELETE", f"{RESPONSES_PATH}/{response_id}")
    expected = {"id": response_id, "object": "response", "deleted": True}
    should(
        "RSP-9",
        reply.status == 200 and reply.json_or_none() == expected,
        f"DELETE {RESPONSES_PATH}/{{id}}: expected 200 {expected}, saw {reply.brief()}",
    )
    again = client.get(worker, f"{RESPONSES_PATH}/{response_id}")
    should("RSP-9", again.status == 404, f"GET after DELETE: expected 404, saw {again.brief()}")


@pytest.mark.rules("RSP-10")
def test_input_items_lists_the_input(worker: Worker, stored: _Exchanges) -> None:
    text = "List me, conformance suite."
    message = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    made = client.post(worker, RESPONSES_PATH, responses_body(worker.model, input=[message]))
    rule("RSP-1", made.status == 200, f"expected 200 to a valid Responses request, saw {made.brief()}")
    reply = client.get(worker, f"{RESPONSES_PATH}/{made.json()['id']}/input_items")
    body = reply.json_or_none() if reply.status == 200 else None
    data = body.get("data") if isinstance(body, dict) else None
    listed = (
        isinstance(body, dict)
        and body.get("object") == "list"
        and isinstance(data, list)
        and len(data) == 1
        and isinstance(data[0], dict)
        and isinstance(data[0].get("id"), str)
        and data[0].get("role") == "user"
        and text in str(data[0].get("content"))
    )
    should(
        "RSP-10",
        listed,
        f'GET {RESPONSES_PATH}/{{id}}/input_items: expected 200 {{"object": "list", "data": [the user '
        f"message, with an id]}}, saw {reply.brief()}",
    )
