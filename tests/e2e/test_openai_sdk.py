"""The OpenAI Python SDK through a real gateway to the fake worker: what a user sees."""

from __future__ import annotations

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.conftest import FAKE_MODEL, OTHER_MODEL, Gateway, worker_record

HELLO: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "hello there gateway"}
]  # 3 prompt tokens for the fake worker


def _usage_row(gw: Gateway, team: str, model: str) -> dict[str, int]:
    rows = [r for r in gw.usage(team) if r["model"] == model]
    assert len(rows) == 1, rows
    return rows[0]


def test_non_stream_chat_returns_the_workers_answer_and_meters_its_usage(gateway: Gateway) -> None:
    key = gateway.new_key()
    client = gateway.client(key["key"])
    reply = client.chat.completions.create(
        model=FAKE_MODEL, messages=HELLO, extra_headers={"x-fake-tokens": "5"}
    )
    assert reply.choices[0].message.content == "tok0 tok1 tok2 tok3 tok4 "
    assert reply.model == FAKE_MODEL
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (3, 5)
    row = _usage_row(gateway, key["team"], FAKE_MODEL)
    assert (row["requests"], row["prompt_tokens"], row["completion_tokens"]) == (1, 3, 5)
    assert row["key_id"] == key["id"]


def test_stream_chat_relays_every_token_and_meters_the_workers_usage(gateway: Gateway) -> None:
    key = gateway.new_key()
    client = gateway.client(key["key"])
    stream = client.chat.completions.create(
        model=FAKE_MODEL, messages=HELLO, stream=True, extra_headers={"x-fake-tokens": "7"}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "".join(f"tok{i} " for i in range(7))
    # The gateway asked the worker for usage; the client did not, so it must not see it.
    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"
    row = _usage_row(gateway, key["team"], FAKE_MODEL)
    assert (row["requests"], row["prompt_tokens"], row["completion_tokens"]) == (1, 3, 7)


def test_stream_with_include_usage_gets_the_usage_chunk_once(gateway: Gateway) -> None:
    key = gateway.new_key()
    client = gateway.client(key["key"])
    chunks = list(
        client.chat.completions.create(
            model=FAKE_MODEL,
            messages=HELLO,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"x-fake-tokens": "4"},
        )
    )
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert len(usage_chunks) == 1
    assert usage_chunks[0].choices == []
    usage = usage_chunks[0].usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (3, 4)
    row = _usage_row(gateway, key["team"], FAKE_MODEL)
    assert (row["prompt_tokens"], row["completion_tokens"]) == (3, 4)


def test_each_token_reaches_the_client_while_the_worker_is_still_generating(
    gateway: Gateway, fake_worker: str
) -> None:
    """The worker sends two tokens, then holds the rest of its stream until the client leaves:
    they can only reach the client if the gateway relays as they come. Buffered, nothing would
    come before the gateway's idle timeout (30 s), and the SDK's read timeout (10 s) fails first."""
    key = gateway.new_key()
    client = gateway.client(key["key"], timeout=10)
    with client.chat.completions.with_streaming_response.create(
        model=FAKE_MODEL,
        messages=HELLO,
        stream=True,
        extra_headers={"x-fake-tokens": "10", "x-fake-hold-after": "2"},
    ) as response:
        request_id = response.headers["x-sluicegate-request-id"]
        got: list[str] = []
        for chunk in response.parse():
            if chunk.choices and chunk.choices[0].delta.content:
                got.append(chunk.choices[0].delta.content)
            if len(got) == 2:
                break
        assert got == ["tok0 ", "tok1 "]
        held = worker_record(fake_worker, request_id)
        assert held is not None
        assert (held["state"], held["tokens_sent"]) == ("running", 2)


def test_completions_stream_and_embeddings(gateway: Gateway) -> None:
    key = gateway.new_key()
    client = gateway.client(key["key"])
    text = "".join(
        c.choices[0].text
        for c in client.completions.create(
            model=FAKE_MODEL, prompt="one two", stream=True, extra_headers={"x-fake-tokens": "3"}
        )
        if c.choices
    )
    assert text == "tok0 tok1 tok2 "
    emb = client.embeddings.create(model=FAKE_MODEL, input=["alpha beta", "gamma"])
    assert len(emb.data) == 2
    assert emb.usage.prompt_tokens == 3
    rows = {r["api"]: r for r in gateway.usage(key["team"]) if r["model"] == FAKE_MODEL}
    metered = {api: (r["requests"], r["prompt_tokens"], r["completion_tokens"]) for api, r in rows.items()}
    assert metered == {"completions": (1, 2, 3), "embeddings": (1, 3, 0)}


def test_alias_and_upstream_model_are_rewritten_both_ways(gateway: Gateway, fake_worker: str) -> None:
    key = gateway.new_key()
    client = gateway.client(key["key"])
    reply = client.chat.completions.with_raw_response.create(
        model="renamed", messages=HELLO, extra_body={"top_k": 7, "ignore_eos": True}
    )
    request_id = reply.headers["x-request-id"]
    assert reply.parse().model == "renamed"
    seen = worker_record(fake_worker, request_id)
    assert seen is not None
    assert seen["body"]["model"] == "upstream/real-name"
    # The contract's engine extra reaches the worker; one the model does not admit is dropped and
    # named (gateway/proxy/translation/engine_fields.py); the key never reaches it.
    assert "top_k" not in seen["body"]
    assert reply.headers["x-sluicegate-ignored"] == "top_k"
    assert seen["body"]["ignore_eos"] is True
    assert "authorization" not in seen["headers"]
    assert key["key"] not in str(seen)

    chunks = list(client.chat.completions.create(model="default", messages=HELLO, stream=True))
    assert {c.model for c in chunks} == {"default"}
    assert [r["model"] for r in gateway.usage(key["team"])] == ["fake-model", "renamed"]


def test_client_request_id_is_echoed_and_forwarded(gateway: Gateway, fake_worker: str) -> None:
    key = gateway.new_key()
    client = gateway.client(key["key"])
    reply = client.chat.completions.with_raw_response.create(
        model=FAKE_MODEL, messages=HELLO, extra_headers={"x-request-id": "trace-abc-123"}
    )
    assert reply.headers["x-request-id"] == "trace-abc-123"
    # The worker knows the request by the gateway's own id, and gets the client's beside it.
    ours = reply.headers["x-sluicegate-request-id"]
    assert ours != "trace-abc-123"
    seen = worker_record(fake_worker, ours)
    assert seen is not None
    assert seen["request_id"] == ours
    assert seen["state"] == "completed"
    assert seen["headers"]["x-client-request-id"] == "trace-abc-123"


def test_models_list_shows_only_what_the_key_may_use(gateway: Gateway) -> None:
    everything = gateway.client(gateway.new_key()["key"]).models.list()
    assert {m.id for m in everything.data} == {FAKE_MODEL, "default", OTHER_MODEL, "renamed"}
    limited = gateway.client(gateway.new_key(models=[OTHER_MODEL])["key"]).models.list()
    assert [m.id for m in limited.data] == [OTHER_MODEL]


def test_revoked_key_stops_working_at_once(gateway: Gateway) -> None:
    key = gateway.new_key()
    client = gateway.client(key["key"])
    client.chat.completions.create(model=FAKE_MODEL, messages=HELLO)
    gateway.admin.call("DELETE", f"/admin/v1/keys/{key['id']}")
    with pytest.raises(openai.AuthenticationError) as err:
        client.chat.completions.create(model=FAKE_MODEL, messages=HELLO)
    assert err.value.status_code == 401
    assert "revoked" in str(err.value.body)
    listed = gateway.admin.call("GET", "/admin/v1/keys", team=key["team"])["data"]
    assert [k["revoked"] for k in listed] == [True]


def test_unknown_key_and_missing_key_are_401(gateway: Gateway) -> None:
    with pytest.raises(openai.AuthenticationError) as err:
        gateway.client("sk-sg-not-a-real-key-at-all").chat.completions.create(
            model=FAKE_MODEL, messages=HELLO
        )
    assert err.value.body == {
        "message": "Invalid API key.",
        "type": "authentication_error",
        "param": None,
        "code": "invalid_api_key",
    }


def test_model_not_allowed_is_403_and_unknown_model_is_404(gateway: Gateway) -> None:
    client = gateway.client(gateway.new_key(models=[OTHER_MODEL])["key"])
    with pytest.raises(openai.PermissionDeniedError) as forbidden:
        client.chat.completions.create(model=FAKE_MODEL, messages=HELLO)
    assert forbidden.value.body["code"] == "model_not_allowed"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="no-such-model", messages=HELLO)
    assert missing.value.body["param"] == "model"  # type: ignore[index]
    assert "no-such-model" in missing.value.body["message"]  # type: ignore[index]
