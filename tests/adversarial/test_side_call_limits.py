"""The worker calls outside the pipeline (a token count by the worker's tokenizer, a stored response
read back) count against the key's request limits and are bounded in size: a key limited to 1
request a minute makes one tokenizer call, not thirty; a key limited to 1 concurrent request holds
its slot while a read runs and gets it back after; a worker answering a stored read without end
is a 502 once the bound is passed, not memory the gateway keeps filling.

A real gateway in front of the fake worker, with its `/tokenize` and stored-response `GET` replaced
by routes the test programs (counted, held until released, or endless)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import anthropic
import openai
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gateway.model_table import NATIVE, ModelConfig, ModelTable, Protocols
from tests.conftest import FAKE_MODEL, GatewayFactory
from tests.http import post
from tests.pipeline.support import DEADLINE_S, metric_sum
from tests.servers import run_uvicorn
from workers.fake.app import create_app as create_fake_worker

MODEL = "side-model"
MIB = 1024 * 1024


@dataclass
class Programmed:
    """What the replaced routes do, and what they saw."""

    tokenize_calls: int = 0
    reads: int = 0
    hold: threading.Event | None = None  # set: a held call may answer
    holding: threading.Event = field(default_factory=threading.Event)  # a call is being held
    endless: bool = False
    sent_mib: int = 0


def _worker(programmed: Programmed) -> object:
    app = create_fake_worker([FAKE_MODEL])
    real_get = next(r for r in app.router.routes if getattr(r, "path", "") == "/v1/responses/{response_id}")

    async def held() -> None:
        if programmed.hold is not None:
            programmed.holding.set()
            await asyncio.to_thread(programmed.hold.wait, DEADLINE_S)

    async def tokenize(request: Request) -> Response:
        programmed.tokenize_calls += 1
        await held()
        return JSONResponse({"count": 5, "max_model_len": 4096, "tokens": [1, 2, 3, 4, 5]})

    async def endless(request: Request) -> AsyncIterator[bytes]:
        """A gigabyte, one MiB at a time, while the gateway keeps the connection: uvicorn drops
        writes to a closed connection without a word, so the count stops at the disconnect."""
        yield b'{"id": "'
        while programmed.sent_mib < 1024 and not await request.is_disconnected():
            programmed.sent_mib += 1
            yield b"x" * MIB

    async def read(request: Request) -> Response:
        programmed.reads += 1
        await held()
        if programmed.endless:
            return StreamingResponse(endless(request), media_type="application/json")
        response: Response = await real_get.endpoint(request)  # type: ignore[attr-defined]
        return response

    app.router.routes[:0] = [
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/v1/responses/{response_id}", read, methods=["GET"]),
    ]
    return app


@pytest.fixture
def programmed() -> Iterator[tuple[Programmed, str]]:
    state = Programmed()
    with run_uvicorn(_worker(state)) as url:
        yield state, url


def _table(url: str) -> ModelTable:
    return ModelTable(
        (
            ModelConfig(
                name=MODEL,
                upstream_model=FAKE_MODEL,
                endpoints=(url,),
                protocols=Protocols(messages=NATIVE, responses=NATIVE),
                tokenize=True,
            ),
        )
    )


HELLO: list[anthropic.types.MessageParam] = [{"role": "user", "content": "count these words"}]


def test_a_key_limited_to_one_request_a_minute_makes_one_tokenizer_call(
    make_gateway: GatewayFactory, programmed: tuple[Programmed, str]
) -> None:
    state, url = programmed
    with make_gateway(_table(url)) as gw:
        key = gw.new_key(rpm=1)["key"]
        with anthropic.Anthropic(base_url=gw.url, api_key=key, max_retries=0) as client:
            counted = client.messages.with_raw_response.count_tokens(model=MODEL, messages=HELLO)
            assert counted.headers["x-sluicegate-token-count"] == "worker"
            assert counted.parse().input_tokens == 5
            for _ in range(5):
                with pytest.raises(anthropic.RateLimitError) as refused:
                    client.messages.count_tokens(model=MODEL, messages=HELLO)
                body = refused.value.body
                assert isinstance(body, dict)
                assert body["type"] == "error"  # Anthropic's envelope, Anthropic's type
                assert body["error"]["type"] == "rate_limit_error"
                assert int(refused.value.response.headers["retry-after"]) >= 1
        # Gemini's countTokens, the same key: refused in Gemini's envelope.
        reply = post(
            f"{gw.url}/v1beta/models/{MODEL}:countTokens",
            {"contents": [{"role": "user", "parts": [{"text": "count these words"}]}]},
            headers={"x-goog-api-key": key},
        )
        assert reply.status == 429, reply.body
        assert reply.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
        assert state.tokenize_calls == 1
        assert metric_sum(gw, "sluicegate_rate_limited_total", limit="rpm", scope="key") == 6


def _create(client: openai.OpenAI) -> str:
    created = client.responses.create(
        model=MODEL, input="one two three", max_output_tokens=8, extra_headers={"x-fake-tokens": "2"}
    )
    return created.id


def _read_once_freed(client: openai.OpenAI, response_id: str) -> None:
    """Reads the response once the key's one slot is free again: released by a usage record
    written behind the answer, so the next call may come a moment before it lands."""
    for _ in range(int(DEADLINE_S / 0.05)):
        try:
            assert client.responses.retrieve(response_id).id == response_id
            return
        except openai.RateLimitError:
            time.sleep(0.05)
    raise AssertionError("the concurrency slot was never freed")


def test_a_stored_read_holds_the_keys_one_concurrent_slot_while_it_runs(
    make_gateway: GatewayFactory, programmed: tuple[Programmed, str]
) -> None:
    state, url = programmed
    with make_gateway(_table(url)) as gw:
        team = gw.new_team()
        response_id = _create(gw.client(gw.new_key(team)["key"]))
        client = gw.client(gw.new_key(team, max_concurrency=1)["key"])
        state.hold = threading.Event()
        first: dict[str, object] = {}

        def read_first() -> None:
            first["id"] = client.responses.retrieve(response_id).id

        reader = threading.Thread(target=read_first)
        reader.start()
        try:
            assert state.holding.wait(DEADLINE_S), "the first read never reached the worker"
            with pytest.raises(openai.RateLimitError) as refused:
                client.responses.input_items.list(response_id)
            assert refused.value.code == "rate_limit_exceeded"
            assert "concurrent" in refused.value.message
        finally:
            state.hold.set()
            reader.join(DEADLINE_S)
        assert first["id"] == response_id
        assert state.reads == 1  # the refused call never reached the worker
        # The slot came back when the read ended (its release is written behind the answer).
        state.hold = None
        _read_once_freed(client, response_id)


def test_an_endless_answer_to_a_stored_read_is_a_502_once_past_the_bound(
    make_gateway: GatewayFactory, programmed: tuple[Programmed, str]
) -> None:
    state, url = programmed
    with make_gateway(_table(url)) as gw:
        key = gw.new_key(max_concurrency=1)["key"]
        client = gw.client(key)
        response_id = _create(client)
        state.endless = True
        with pytest.raises(openai.InternalServerError) as failed:
            client.responses.retrieve(response_id)
        assert failed.value.status_code == 502
        assert failed.value.code == "upstream_error"
        # The gateway stopped reading at its bound (16 MiB), plus what the sockets buffer: it did
        # not read the worker's gigabyte, nor its former 64 MiB.
        assert state.sent_mib < 48, state.sent_mib
        state.endless = False
        _read_once_freed(client, response_id)  # the failed read gave its slot back
