"""MSG rules (optional, `--worker-messages`): Anthropic Messages served by the worker itself, which
the gateway forwards as they are on a native pool and meters from the stream's own usage."""

from __future__ import annotations

from typing import Any

import pytest

from workers.conformance import client
from workers.conformance.checks import anthropic_or_openai_error, is_int, named_event_stream
from workers.conformance.client import JSONObject, Worker
from workers.conformance.conftest import SHORT_TOKENS, capability
from workers.conformance.rules import rule, should

MESSAGES_PATH = "/v1/messages"
COUNT_PATH = "/v1/messages/count_tokens"
STOP_REASONS = ("end_turn", "max_tokens", "stop_sequence", "tool_use")
EVENTS = (
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
)


def messages_body(model: str, **extra: Any) -> JSONObject:
    return {
        "model": model,
        "max_tokens": SHORT_TOKENS,
        "system": "You are terse.",
        "messages": [{"role": "user", "content": "Say hello to the conformance suite, please."}],
        "temperature": 0,
        **extra,
    }


_Exchanges = client.Exchanges


@pytest.fixture(scope="session")
def _messages(worker: Worker) -> _Exchanges:
    return _Exchanges(worker, MESSAGES_PATH, messages_body)


@pytest.fixture
def messages(pytestconfig: pytest.Config, _messages: _Exchanges) -> _Exchanges:
    capability(pytestconfig, "--worker-messages", "Anthropic Messages")
    return _messages


def _answer_usage(body: Any) -> dict[str, int]:
    usage = body.get("usage") if isinstance(body, dict) else None
    rule(
        "MSG-1",
        isinstance(usage, dict)
        and is_int(usage.get("input_tokens"))
        and usage["input_tokens"] >= 1
        and is_int(usage.get("output_tokens"))
        and usage["output_tokens"] >= 0,
        f"expected usage {{input_tokens >= 1, output_tokens >= 0}} (integers), saw {usage!r}",
    )
    assert isinstance(usage, dict)
    return usage


@pytest.mark.rules("MSG-1", "REQ-1")
def test_message_answer(worker: Worker, messages: _Exchanges) -> None:
    reply = messages.whole()
    rule("MSG-1", reply.status == 200, f"expected 200 to a valid Messages request, saw {reply.brief()}")
    content_type = reply.headers.get("content-type", "")
    rule("MSG-1", content_type.startswith("application/json"), f"expected JSON, saw {content_type!r}")
    body = reply.json()
    for name, value in (("type", "message"), ("role", "assistant")):
        rule("MSG-1", body.get(name) == value, f"expected {name!r}: {value!r}, saw {body}")
    rule("MSG-1", isinstance(body.get("id"), str) and body["id"], f"expected a string id, saw {body}")
    rule("REQ-1", body.get("model") == worker.model, f"expected model {worker.model!r}, saw {body}")
    content = body.get("content")
    rule(
        "MSG-1",
        isinstance(content, list)
        and all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in content)
        and all(isinstance(b.get("text"), str) for b in content if b["type"] == "text"),
        f"expected content: a list of blocks with a string type (text blocks with a string text), "
        f"saw {content!r}",
    )
    rule(
        "MSG-1",
        body.get("stop_reason") in STOP_REASONS,
        f"expected stop_reason one of {STOP_REASONS}, saw {body.get('stop_reason')!r}",
    )
    usage = _answer_usage(body)
    rule(
        "MSG-1",
        usage["output_tokens"] <= SHORT_TOKENS,
        f"expected output_tokens <= max_tokens {SHORT_TOKENS}, saw {usage}",
    )
    if body["stop_reason"] == "max_tokens":
        rule(
            "MSG-1",
            usage["output_tokens"] == SHORT_TOKENS,
            f'expected stop_reason "max_tokens" to mean exactly {SHORT_TOKENS} output tokens, saw {usage}',
        )


@pytest.mark.rules("MSG-2")
def test_message_stream_framing(messages: _Exchanges) -> None:
    stream = messages.stream()
    where = "a streamed Messages request"
    named_event_stream("MSG-2", stream, where)
    names = [name for name in stream.names if name != "ping"]
    unknown = sorted(set(names) - set(EVENTS))
    rule("MSG-2", not unknown, f"{where}: expected only the Messages events {EVENTS}, saw {unknown}")
    rule(
        "MSG-2",
        names[:1] == ["message_start"] and names[-1:] == ["message_stop"],
        f"{where}: expected message_start first and message_stop last (the body ending there), saw {names}",
    )
    for once in ("message_start", "message_delta", "message_stop"):
        rule("MSG-2", names.count(once) == 1, f"{where}: expected exactly one {once}, saw {names}")
    rule(
        "MSG-2",
        names.index("message_delta") == len(names) - 2,
        f"{where}: expected message_delta right before message_stop, after every content block, saw {names}",
    )
    open_blocks: set[Any] = set()
    problems = []
    for name, data in stream.events:
        index = data.get("index")
        if name == "content_block_start":
            if index in open_blocks or not isinstance(data.get("content_block"), dict):
                problems.append(f"content_block_start {data}")
            open_blocks.add(index)
        elif name in ("content_block_delta", "content_block_stop"):
            if index not in open_blocks:
                problems.append(f"{name} for block {index!r}, which is not open")
            if name == "content_block_stop":
                open_blocks.discard(index)
    rule(
        "MSG-2",
        not problems and not open_blocks,
        f"{where}: expected every delta and stop inside a started block and every block stopped, "
        f"saw {problems[:3]}, still open {sorted(map(str, open_blocks))}",
    )


@pytest.mark.rules("MSG-3", "REQ-1")
def test_message_stream_usage(worker: Worker, messages: _Exchanges) -> None:
    stream, where = messages.stream(), "a streamed Messages request"
    starts, deltas = stream.of("message_start"), stream.of("message_delta")
    rule("MSG-3", len(starts) == 1 and len(deltas) == 1, f"{where}: expected message_start and message_delta")
    message = starts[0].get("message")
    rule("MSG-3", isinstance(message, dict), f"{where}: expected message_start.message, saw {starts[0]}")
    assert isinstance(message, dict)
    rule("MSG-3", isinstance(message.get("id"), str), f"{where}: expected message.id, saw {message}")
    rule(
        "REQ-1", message.get("model") == worker.model, f"{where}: expected model {worker.model!r}: {message}"
    )
    usage = message.get("usage")
    input_tokens = usage.get("input_tokens") if isinstance(usage, dict) else None
    rule(
        "MSG-3",
        is_int(input_tokens) and int(input_tokens or 0) >= 1,
        f"{where}: expected message_start.message.usage.input_tokens >= 1, saw usage {usage!r}",
    )
    final = deltas[0].get("usage")
    output_tokens = final.get("output_tokens") if isinstance(final, dict) else None
    rule(
        "MSG-3",
        is_int(output_tokens) and 0 <= int(output_tokens or 0) <= SHORT_TOKENS,
        f"{where}: expected message_delta.usage.output_tokens from 0 to max_tokens {SHORT_TOKENS}, "
        f"saw {deltas[0]}",
    )
    stop = deltas[0].get("delta")
    rule(
        "MSG-3",
        isinstance(stop, dict) and stop.get("stop_reason") in STOP_REASONS,
        f"{where}: expected message_delta.delta.stop_reason one of {STOP_REASONS}, saw {deltas[0]}",
    )
    whole = messages.whole()
    if whole.status == 200:
        expected = _answer_usage(whole.json())["input_tokens"]
        rule(
            "MSG-3",
            input_tokens == expected,
            f"{where}: expected the input_tokens of the same request unstreamed ({expected}), "
            f"saw {input_tokens}",
        )
    if isinstance(final, dict) and "input_tokens" in final:
        rule(
            "MSG-3",
            final["input_tokens"] == input_tokens,
            f"{where}: expected message_delta's input_tokens to repeat message_start's, saw {final}",
        )


@pytest.mark.rules("MSG-4")
def test_message_errors(worker: Worker, messages: _Exchanges) -> None:
    unknown = messages_body(f"no-such-model-{worker.model}-x")
    cases: list[tuple[str, JSONObject | bytes, int]] = [
        ("an unknown model", unknown, 404),
        ("an unknown model, streamed", {**unknown, "stream": True}, 404),
        ("no max_tokens", {k: v for k, v in messages_body(worker.model).items() if k != "max_tokens"}, 400),
        ("messages not a list", messages_body(worker.model, messages="hello"), 400),
        ("a body that is not JSON", b'{"model": "x", "messages": [', 400),
    ]
    for what, body, status in cases:
        reply = client.post(worker, MESSAGES_PATH, body)
        rule(
            "MSG-4",
            reply.status == status
            and not reply.headers.get("content-type", "").startswith("text/event-stream"),
            f"{MESSAGES_PATH} with {what}: expected HTTP {status} with a JSON body, saw {reply.brief()}",
        )
        anthropic_or_openai_error(reply, f"{MESSAGES_PATH} with {what}", "MSG-4")


@pytest.mark.rules("MSG-5")
def test_count_tokens_agrees_with_the_answer(worker: Worker, messages: _Exchanges) -> None:
    whole = messages.whole()
    rule("MSG-1", whole.status == 200, f"expected 200 to a valid Messages request, saw {whole.brief()}")
    expected = _answer_usage(whole.json())["input_tokens"]
    body = {k: v for k, v in messages_body(worker.model).items() if k not in ("max_tokens", "temperature")}
    reply = client.post(worker, COUNT_PATH, body)
    parsed = reply.json_or_none() if reply.status == 200 else None
    counted = parsed.get("input_tokens") if isinstance(parsed, dict) else None
    should(
        "MSG-5",
        counted == expected,
        f'{COUNT_PATH}: expected 200 {{"input_tokens": {expected}}} (the answer\'s input_tokens), '
        f"saw {reply.brief()}",
    )
