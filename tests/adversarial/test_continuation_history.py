"""A native Responses continuation (`previous_response_id`) makes the worker prefill the whole
conversation so far: the gateway knows its size (the prompt and output tokens of each stored
response, kept with its holder) and counts it in the reservation, the tokens-per-minute limit and,
when the client leaves before the worker's usage, the bill.

A real gateway in front of the fake worker, which counts a continuation's prompt as the whole
stored conversation, as vLLM does."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from gateway.model_table import NATIVE, ModelConfig, ModelTable, Protocols
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory, default_table
from tests.pipeline.support import wait_requests_metered

MODEL = "native-responses"
HISTORY_WORDS = 3000  # the fake's prompt tokens for the first turn
FIRST_OUTPUT = 4


@pytest.fixture
def gw(make_gateway: GatewayFactory, fake_worker: str) -> Iterator[Gateway]:
    native = ModelConfig(
        name=MODEL, upstream_model=FAKE_MODEL, endpoints=(fake_worker,), protocols=Protocols(responses=NATIVE)
    )
    with make_gateway(ModelTable((*default_table(fake_worker).models, native))) as gateway:
        yield gateway


def _long_conversation(client: openai.OpenAI, *, stream: bool) -> str:
    """A first turn of HISTORY_WORDS prompt tokens and FIRST_OUTPUT of output, stored."""
    fields = {
        "model": MODEL,
        "input": " ".join(["word"] * HISTORY_WORDS),
        "max_output_tokens": 16,
        "extra_headers": {"x-fake-tokens": str(FIRST_OUTPUT)},
    }
    if not stream:
        return client.responses.create(**fields).id  # type: ignore[call-overload,no-any-return]
    # Its events apart (the first before any usage), as a real engine's come.
    fields["extra_headers"] = {"x-fake-tokens": str(FIRST_OUTPUT), "x-fake-token-delay-ms": "50"}
    with client.responses.create(stream=True, **fields) as events:  # type: ignore[call-overload]
        ids = [e.response.id for e in events if e.type == "response.completed"]
    assert len(ids) == 1
    return str(ids[0])


def test_continuations_of_a_conversation_larger_than_the_tpm_limit_are_not_admitted(gw: Gateway) -> None:
    team = gw.new_team()
    previous = _long_conversation(gw.client(gw.new_key(team)["key"]), stream=False)
    limited = gw.client(gw.new_key(team, tpm=1000)["key"])  # a fraction of the history
    admitted, refusals = 0, []
    for _ in range(5):
        try:
            limited.responses.create(
                model=MODEL, input="and then?", previous_response_id=previous, max_output_tokens=16
            )
            admitted += 1
        except (openai.BadRequestError, openai.RateLimitError) as refused:
            refusals.append(refused)
    assert admitted == 0, "continuations were admitted as if they had no history"
    for refusal in refusals:
        # No wait would admit it: a 400 that says why, not a 429 that SDKs retry for ever.
        assert refusal.status_code == 400
        assert "tokens per minute" in refusal.message
    # Only the first turn was billed; the refused ones never reached the worker.
    totals = wait_requests_metered(gw, team, 1)
    assert totals["prompt_tokens"] == HISTORY_WORDS


def test_a_client_that_leaves_a_continuation_early_is_billed_at_least_the_history(gw: Gateway) -> None:
    """The first turn streamed: its holder is written at its first event (before any usage) and
    corrected to the worker's count at its end; the continuation's client leaves before the
    worker's usage, so its bill is the gateway's estimate: the history and its own prompt."""
    team = gw.new_team()
    client = gw.client(gw.new_key(team)["key"])
    previous = _long_conversation(client, stream=True)
    history = HISTORY_WORDS + FIRST_OUTPUT
    with client.responses.create(
        model=MODEL,
        input="and then?",
        previous_response_id=previous,
        max_output_tokens=4000,
        stream=True,
        extra_headers={"x-fake-tokens": "4000", "x-fake-token-delay-ms": "20"},
    ) as events:
        deltas = 0
        for event in events:
            deltas += event.type == "response.output_text.delta"
            if deltas == 3:
                break  # the client leaves; the worker is still generating
    totals = wait_requests_metered(gw, team, 2)
    continuation_prompt = totals["prompt_tokens"] - HISTORY_WORDS
    assert continuation_prompt >= history, totals
    # The worker's count of the first turn, not the gateway's estimate of it (15,000 characters:
    # 3,750), plus a few tokens for the continuation's own prompt.
    assert continuation_prompt < history + 50, totals
    assert totals["completion_tokens"] >= FIRST_OUTPUT + 3
