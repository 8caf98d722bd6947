"""Anthropic Messages and OpenAI Responses forwarded natively (`protocols: {…: native}`) to workers
that serve them, with the real `anthropic` and `openai` SDKs as clients, through a real gateway to
two fake worker processes. Each fake keeps the responses it stored in its own memory, as vLLM
does: a stored response read back from the other worker would be a 404, which is what proves the
gateway sends every call about a response to the endpoint that made it.
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest
import redis
from anthropic.types import MessageParam

from gateway.model_table import NATIVE, ModelConfig, ModelTable, Protocols
from gateway.redis import keys
from tests.conftest import FAKE_MODEL, Gateway, GatewayFactory, default_table, worker_record
from tests.http import post
from tests.pipeline.support import wait_requests_metered
from tests.servers import run_uvicorn
from workers.fake.app import create_app as create_fake_worker

NATIVE_MODEL = "native-model"
HELLO: list[MessageParam] = [
    {"role": "user", "content": "hello there gateway"}
]  # 3 prompt tokens at the fake


@pytest.fixture(scope="module")
def second_worker() -> Iterator[str]:
    with run_uvicorn(create_fake_worker([FAKE_MODEL])) as url:
        yield url


@pytest.fixture(scope="module")
def gw(make_gateway_module: GatewayFactory, fake_worker: str, second_worker: str) -> Iterator[Gateway]:
    native = ModelConfig(
        name=NATIVE_MODEL,
        upstream_model=FAKE_MODEL,
        endpoints=(fake_worker, second_worker),
        protocols=Protocols(messages=NATIVE, responses=NATIVE),
        tokenize=True,
    )
    with make_gateway_module(ModelTable((*default_table(fake_worker).models, native))) as gateway:
        yield gateway


def _anthropic(gw: Gateway, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key=key, max_retries=0)


def _holder(request_id: str, *urls: str) -> str:
    """Which worker got the request (the fake records it under the gateway's id)."""
    got = [url for url in urls if worker_record(url, request_id) is not None]
    assert len(got) == 1, got
    return got[0]


# --- Messages -------------------------------------------------------------------------------------


def test_messages_reach_the_worker_as_messages_and_are_metered_as_told(
    gw: Gateway, fake_worker: str, second_worker: str
) -> None:
    key = gw.new_key()
    with _anthropic(gw, key["key"]) as client:
        raw = client.messages.with_raw_response.create(
            model=NATIVE_MODEL,
            max_tokens=64,
            messages=HELLO,
            extra_headers={"x-fake-tokens": "5"},
        )
    message = raw.parse()
    assert (message.type, message.role, message.model) == ("message", "assistant", NATIVE_MODEL)
    assert [getattr(b, "text", None) for b in message.content] == ["tok0 tok1 tok2 tok3 tok4 "]
    assert (message.usage.input_tokens, message.usage.output_tokens) == (3, 5)
    request_id = raw.headers["x-sluicegate-request-id"]
    record = worker_record(_holder(request_id, fake_worker, second_worker), request_id)
    assert record is not None
    assert record["path"] == "/v1/messages"
    assert record["body"]["model"] == FAKE_MODEL  # the worker's name for it
    totals = wait_requests_metered(gw, key["team"], 1)
    assert (totals["prompt_tokens"], totals["completion_tokens"]) == (3, 5)


def test_a_messages_stream_is_relayed_event_by_event_and_metered_as_told(gw: Gateway) -> None:
    key = gw.new_key()
    with (
        _anthropic(gw, key["key"]) as client,
        client.messages.stream(
            model=NATIVE_MODEL,
            max_tokens=64,
            messages=HELLO,
            extra_headers={"x-fake-tokens": "4"},
        ) as stream,
    ):
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert (kinds[0], kinds[-1]) == ("message_start", "message_stop")
    assert kinds.count("text") == 4
    assert final.model == NATIVE_MODEL
    assert "".join(getattr(b, "text", "") for b in final.content) == "tok0 tok1 tok2 tok3 "
    assert (final.usage.input_tokens, final.usage.output_tokens) == (3, 4)
    totals = wait_requests_metered(gw, key["team"], 1)
    assert (totals["prompt_tokens"], totals["completion_tokens"]) == (3, 4)


def test_a_workers_refusal_is_an_anthropic_error_of_anthropics_type(gw: Gateway) -> None:
    key = gw.new_key()
    with _anthropic(gw, key["key"]) as client, pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model=NATIVE_MODEL,
            max_tokens=8,
            messages=HELLO,
            extra_headers={"x-fake-status": "400"},
        )
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"  # not vLLM's BadRequestError


def test_a_worker_that_fails_mid_stream_ends_it_with_an_anthropic_error_event(gw: Gateway) -> None:
    key = gw.new_key()
    events: list[str] = []

    def read_stream() -> None:
        with client.messages.stream(
            model=NATIVE_MODEL,
            max_tokens=64,
            messages=HELLO,
            extra_headers={"x-fake-tokens": "6", "x-fake-error-event-after": "2"},
        ) as stream:
            events.extend(event.type for event in stream)

    with _anthropic(gw, key["key"]) as client, pytest.raises(anthropic.APIStatusError) as caught:
        read_stream()
    assert events.count("text") == 2  # what came before the failure was relayed
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["error"]["type"] == "api_error"


def test_count_tokens_asks_the_workers_tokenizer(gw: Gateway) -> None:
    key = gw.new_key()
    with _anthropic(gw, key["key"]) as client:
        native = client.messages.with_raw_response.count_tokens(model=NATIVE_MODEL, messages=HELLO)
        translated = client.messages.with_raw_response.count_tokens(model=FAKE_MODEL, messages=HELLO)
    assert native.headers["x-sluicegate-token-count"] == "worker"
    assert native.parse().input_tokens == 3  # the fake's count of the same prompt
    assert translated.headers["x-sluicegate-token-count"] == "estimate"


# --- Responses ------------------------------------------------------------------------------------


def test_a_response_is_created_read_back_listed_and_deleted_at_the_worker_that_stored_it(
    gw: Gateway,
) -> None:
    key = gw.new_key()
    client = gw.client(key["key"])
    created = client.responses.create(
        model=NATIVE_MODEL, input="one two three", max_output_tokens=16, extra_headers={"x-fake-tokens": "3"}
    )
    assert (created.status, created.model, created.output_text) == (
        "completed",
        NATIVE_MODEL,
        "tok0 tok1 tok2 ",
    )
    assert created.usage is not None
    assert (created.usage.input_tokens, created.usage.output_tokens) == (3, 3)
    for _ in range(4):  # whichever endpoint the policy would pick, the one holding it answers
        again = client.responses.retrieve(created.id)
        assert (again.id, again.model, again.output_text) == (created.id, NATIVE_MODEL, "tok0 tok1 tok2 ")
    items = client.responses.input_items.list(created.id)
    assert len(items.data) >= 1
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    totals = wait_requests_metered(gw, key["team"], 1)  # the reads meter nothing
    assert (totals["prompt_tokens"], totals["completion_tokens"]) == (3, 3)


def test_previous_response_id_reaches_the_endpoint_that_holds_it(
    gw: Gateway, fake_worker: str, second_worker: str
) -> None:
    key = gw.new_key()
    client = gw.client(key["key"])
    held: dict[str, str] = {}  # worker url -> a response it holds
    for _ in range(20):
        raw = client.responses.with_raw_response.create(
            model=NATIVE_MODEL, input="first turn", max_output_tokens=4
        )
        held.setdefault(
            _holder(raw.headers["x-sluicegate-request-id"], fake_worker, second_worker), raw.parse().id
        )
        if len(held) == 2:
            break
    assert len(held) == 2, "the policy never used the second endpoint"
    for url, response_id in held.items():
        for _ in range(3):
            raw = client.responses.with_raw_response.create(
                model=NATIVE_MODEL,
                input="next turn",
                previous_response_id=response_id,
                max_output_tokens=4,
                extra_headers={"x-fake-tokens": "2"},
            )
            assert raw.parse().status == "completed"
            assert _holder(raw.headers["x-sluicegate-request-id"], fake_worker, second_worker) == url


def test_a_streamed_response_is_relayed_and_its_id_is_usable_at_once(gw: Gateway) -> None:
    key = gw.new_key()
    client = gw.client(key["key"])
    kinds: list[str] = []
    with client.responses.stream(
        model=NATIVE_MODEL, input="one two", max_output_tokens=16, extra_headers={"x-fake-tokens": "2"}
    ) as stream:
        for event in stream:
            if event.type == "response.created":
                # The holder is written before the client sees the id.
                assert client.responses.retrieve(event.response.id).id == event.response.id
            kinds.append(event.type)
        final = stream.get_final_response()
    assert (kinds[0], kinds[-1]) == ("response.created", "response.completed")
    assert kinds.count("response.output_text.delta") == 2
    assert (final.model, final.output_text) == (NATIVE_MODEL, "tok0 tok1 ")
    assert final.usage is not None
    totals = wait_requests_metered(gw, key["team"], 1)
    assert (totals["prompt_tokens"], totals["completion_tokens"]) == (
        final.usage.input_tokens,
        final.usage.output_tokens,
    )


def test_another_teams_response_does_not_exist_for_it(gw: Gateway, redis_client: redis.Redis) -> None:
    owner = gw.client(gw.new_key()["key"])
    created = owner.responses.create(model=NATIVE_MODEL, input="secret words", max_output_tokens=4)
    other = gw.client(gw.new_key()["key"])
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.input_items.list(created.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.create(model=NATIVE_MODEL, input="x", previous_response_id=created.id)
    assert owner.responses.retrieve(created.id).id == created.id  # untouched by the attempts
    ttl = redis_client.pttl(keys.stored_response(created.id))
    assert 0 < ttl <= gw.settings.stored_response_ttl_s * 1000


def test_ids_that_are_not_response_ids_are_404_and_never_reach_redis_or_a_worker(gw: Gateway) -> None:
    key = gw.new_key()["key"]
    client = gw.client(key)
    for bad in ("no-such-response", "a.b", "x" * 200):
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(bad)
    reply = post(
        gw.url + "/v1/responses",
        {"model": NATIVE_MODEL, "input": "x", "previous_response_id": "{t:other}"},
        headers={"authorization": f"Bearer {key}"},
    )
    assert reply.status == 400
    assert reply.json()["error"]["param"] == "previous_response_id"


def test_a_translated_model_still_refuses_what_needs_a_stored_response(gw: Gateway) -> None:
    client = gw.client(gw.new_key()["key"])
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=FAKE_MODEL, input="x", previous_response_id="resp_abc")
    assert "protocols: {responses: native}" in str(caught.value)
