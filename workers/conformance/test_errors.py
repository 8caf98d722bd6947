"""ERR rules: bad requests, unknown models, context overflow and a full worker, all as the OpenAI error
envelope with the status the gateway maps."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from workers.conformance import client
from workers.conformance.checks import error_envelope
from workers.conformance.client import Reply, Worker
from workers.conformance.conftest import CHAT_PATH, COMPLETIONS_PATH, Exchanges, chat_body, completion_body
from workers.conformance.rules import inconclusive, rule


def _unknown_model() -> str:
    return f"no-such-model-{uuid.uuid4().hex[:8]}"


@pytest.mark.rules("ERR-2", "ERR-1")
@pytest.mark.parametrize("path", [CHAT_PATH, COMPLETIONS_PATH], ids=["chat", "completions"])
def test_invalid_json_is_400(worker: Worker, path: str) -> None:
    reply = client.post(worker, path, b'{"model": "x", "messages": [')
    rule(
        "ERR-2", reply.status == 400, f"{path} with a truncated JSON body: expected 400, saw {reply.brief()}"
    )
    error_envelope(reply, f"{path} with a truncated JSON body")


def _without(body: dict[str, Any], field: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != field}


# (name, path, body builder) for requests whose fields are invalid.
INVALID: list[tuple[str, str, Any]] = [
    ("chat-messages-missing", CHAT_PATH, lambda m: _without(chat_body(m), "messages")),
    ("chat-messages-not-a-list", CHAT_PATH, lambda m: chat_body(m, messages="hello")),
    ("chat-max_tokens-negative", CHAT_PATH, lambda m: chat_body(m, max_tokens=-1)),
    ("chat-max_tokens-not-a-number", CHAT_PATH, lambda m: chat_body(m, max_tokens="ten")),
    ("chat-temperature-not-a-number", CHAT_PATH, lambda m: chat_body(m, temperature="hot")),
    ("completions-prompt-missing", COMPLETIONS_PATH, lambda m: _without(completion_body(m), "prompt")),
    ("completions-max_tokens-negative", COMPLETIONS_PATH, lambda m: completion_body(m, max_tokens=-1)),
]


@pytest.mark.rules("ERR-3", "ERR-1")
@pytest.mark.parametrize(("name", "path", "build"), INVALID, ids=[case[0] for case in INVALID])
def test_invalid_fields_are_400(worker: Worker, name: str, path: str, build: Any) -> None:
    body = build(worker.model)
    reply = client.post(worker, path, body)
    rule("ERR-3", reply.status == 400, f"{name} ({body}): expected 400, saw {reply.brief()}")
    error_envelope(reply, name)


@pytest.mark.rules("ERR-4", "ERR-1")
@pytest.mark.parametrize("path", [CHAT_PATH, COMPLETIONS_PATH], ids=["chat", "completions"])
def test_unknown_model_is_404(worker: Worker, path: str) -> None:
    model = _unknown_model()
    body = (chat_body if path == CHAT_PATH else completion_body)(model)
    reply = client.post(worker, path, body)
    rule("ERR-4", reply.status == 404, f"{path} for model {model!r}: expected 404, saw {reply.brief()}")
    error_envelope(reply, f"{path} for an unknown model")


def _stream_error(worker: Worker, path: str, body: dict[str, Any], status: int, what: str) -> Reply:
    reply = client.post(worker, path, {**body, "stream": True})
    content_type = reply.headers.get("content-type", "")
    rule(
        "ERR-7",
        reply.status == status and not content_type.startswith("text/event-stream"),
        f"{path} streamed with {what}: expected HTTP {status} with a JSON body, "
        f"saw {reply.brief()} ({content_type!r})",
    )
    error_envelope(reply, f"{path} streamed with {what}")
    return reply


@pytest.mark.rules("ERR-7", "ERR-1")
@pytest.mark.parametrize("path", [CHAT_PATH, COMPLETIONS_PATH], ids=["chat", "completions"])
def test_errors_before_the_first_byte_are_http_errors(worker: Worker, path: str) -> None:
    build = chat_body if path == CHAT_PATH else completion_body
    _stream_error(worker, path, build(_unknown_model()), 404, "an unknown model")
    _stream_error(worker, path, build(worker.model, max_tokens=-1), 400, "max_tokens -1")


@pytest.mark.rules("ERR-5", "ERR-1")
def test_a_request_beyond_the_context_window_is_400(worker: Worker, exchanges: Exchanges) -> None:
    limit = exchanges.max_model_len()
    if limit is None:
        inconclusive("ERR-5", "/v1/models does not report max_model_len for the model (EP-7)")
    body = chat_body(worker.model, max_tokens=limit + 1)
    reply = client.post(worker, CHAT_PATH, body)
    rule(
        "ERR-5",
        reply.status == 400,
        f"max_tokens {limit + 1} with max_model_len {limit}: expected 400, saw {reply.brief()}",
    )
    error_envelope(reply, "a request beyond the context window")


@pytest.mark.rules("ERR-6", "ERR-1")
def test_a_burst_is_served_or_refused_with_retry_after(worker: Worker, pytestconfig: pytest.Config) -> None:
    burst: int = pytestconfig.getoption("--worker-burst")
    body = chat_body(worker.model, max_tokens=16)
    with ThreadPoolExecutor(burst) as pool:
        replies = list(pool.map(lambda _: client.post(worker, CHAT_PATH, body), range(burst)))
    for number, reply in enumerate(replies, 1):
        where = f"request {number} of a burst of {burst}"
        if reply.status == 200:
            continue
        rule(
            "ERR-6",
            reply.status in (429, 503),
            f"{where}: expected 200, or 429/503 when the worker is full, saw {reply.brief()}",
        )
        retry_after = reply.headers.get("retry-after", "")
        rule(
            "ERR-6",
            retry_after.strip().isdigit(),
            f"{where}: expected a Retry-After in whole seconds with HTTP {reply.status}, saw {retry_after!r}",
        )
        error_envelope(reply, where)
