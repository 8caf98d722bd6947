"""TOK rules (optional, `--worker-tokenize`): vLLM's `POST /tokenize`, which the gateway asks for a
prompt's size in the worker's own tokens, so it must count exactly as the worker's usage does."""

from __future__ import annotations

from typing import Any

import pytest

from workers.conformance import client
from workers.conformance.checks import error_envelope, is_int
from workers.conformance.client import Worker
from workers.conformance.conftest import Exchanges, capability, chat_body, completion_body
from workers.conformance.rules import rule

TOKENIZE_PATH = "/tokenize"


@pytest.fixture
def tokenize(pytestconfig: pytest.Config) -> None:
    capability(pytestconfig, "--worker-tokenize", "vLLM's POST /tokenize")


def _count(rule_id: str, worker: Worker, exchanges: Exchanges, body: dict[str, Any], what: str) -> int:
    reply = client.post(worker, TOKENIZE_PATH, body)
    where = f"{TOKENIZE_PATH} with {what}"
    rule(rule_id, reply.status == 200, f"{where}: expected 200, saw {reply.brief()}")
    answer = reply.json()
    count, tokens = answer.get("count"), answer.get("tokens")
    rule(
        rule_id,
        is_int(count)
        and count >= 1
        and isinstance(tokens, list)
        and len(tokens) == count
        and all(is_int(t) for t in tokens),
        f'{where}: expected {{"count": N >= 1, "tokens": [N integers], ...}}, saw {reply.brief()}',
    )
    limit = answer.get("max_model_len")
    rule(rule_id, is_int(limit) and limit > 0, f"{where}: expected an integer max_model_len, saw {limit!r}")
    reported = exchanges.max_model_len()
    rule(
        rule_id,
        reported is None or limit == reported,
        f"{where}: expected max_model_len {reported} as /v1/models reports it, saw {limit}",
    )
    return int(count)


def _prompt_tokens(exchanges: Exchanges, kind: str) -> int | None:
    reply = exchanges.whole(kind)
    usage = reply.json().get("usage") if reply.status == 200 else None
    value = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return value if is_int(value) else None


@pytest.mark.rules("TOK-1")
def test_tokenize_counts_messages_as_chat_does(worker: Worker, exchanges: Exchanges, tokenize: None) -> None:
    messages = chat_body(worker.model)["messages"]
    count = _count("TOK-1", worker, exchanges, {"model": worker.model, "messages": messages}, "messages")
    expected = _prompt_tokens(exchanges, "chat")
    rule(
        "TOK-1",
        count == expected,
        f"{TOKENIZE_PATH} with the messages of a chat request: expected count = its prompt_tokens "
        f"({expected}), saw {count}",
    )


@pytest.mark.rules("TOK-2")
def test_tokenize_counts_a_prompt_as_completions_does(
    worker: Worker, exchanges: Exchanges, tokenize: None
) -> None:
    prompt = completion_body(worker.model)["prompt"]
    count = _count("TOK-2", worker, exchanges, {"model": worker.model, "prompt": prompt}, "a prompt")
    expected = _prompt_tokens(exchanges, "completions")
    rule(
        "TOK-2",
        count == expected,
        f"{TOKENIZE_PATH} with the prompt of a completions request: expected count = its prompt_tokens "
        f"({expected}), saw {count}",
    )


@pytest.mark.rules("TOK-3")
def test_tokenize_errors(worker: Worker, tokenize: None) -> None:
    cases = [
        ("an unknown model", {"model": f"no-such-model-{worker.model}-x", "prompt": "hello"}, 404),
        ("neither prompt nor messages", {"model": worker.model}, 400),
    ]
    for what, body, status in cases:
        reply = client.post(worker, TOKENIZE_PATH, body)
        where = f"{TOKENIZE_PATH} with {what}"
        rule("TOK-3", reply.status == status, f"{where}: expected {status}, saw {reply.brief()}")
        error_envelope(reply, where, "TOK-3")
