"""EP and REQ rules: the endpoints, and how a worker treats the fields of a request."""

from __future__ import annotations

import uuid
from typing import Any

import openai
import pytest

from workers.conformance import client
from workers.conformance.checks import FINISH_REASONS, is_int, usage_object
from workers.conformance.client import Worker
from workers.conformance.conftest import CHAT_PATH, COMPLETIONS_PATH, Exchanges, chat_body, completion_body
from workers.conformance.rules import inconclusive, rule, should


@pytest.mark.rules("EP-1")
def test_models_lists_the_served_model(worker: Worker, exchanges: Exchanges) -> None:
    reply = exchanges.models()
    rule("EP-1", reply.status == 200, f"expected GET /v1/models to answer 200, saw {reply.brief()}")
    body = reply.json_or_none()
    rule(
        "EP-1",
        isinstance(body, dict) and body.get("object") == "list" and isinstance(body.get("data"), list),
        f'expected {{"object": "list", "data": [...]}}, saw {reply.brief()}',
    )
    entries = [e for e in body["data"] if isinstance(e, dict)]
    bad = [e for e in entries if not isinstance(e.get("id"), str) or e.get("object") != "model"]
    rule("EP-1", not bad, f'expected every entry to have a string id and "object": "model", saw {bad}')
    ids = [e["id"] for e in entries]
    rule("EP-1", worker.model in ids, f"expected the served name {worker.model!r} in the list, saw {ids}")


@pytest.mark.rules("EP-7")
def test_models_report_their_context_window(worker: Worker, exchanges: Exchanges) -> None:
    should(
        "EP-7",
        exchanges.max_model_len() is not None,
        f"expected an integer max_model_len on the {worker.model!r} entry, saw {exchanges.models().brief()}",
    )


@pytest.mark.rules("EP-2", "REQ-1", "USE-1")
def test_chat_answer(worker: Worker, exchanges: Exchanges) -> None:
    reply = exchanges.whole("chat")
    rule("EP-2", reply.status == 200, f"expected 200 to a valid chat request, saw {reply.brief()}")
    content_type = reply.headers.get("content-type", "")
    rule("EP-2", content_type.startswith("application/json"), f"expected JSON, saw {content_type!r}")
    body = reply.json()
    rule("EP-2", body.get("object") == "chat.completion", f'expected "object": "chat.completion": {body}')
    rule("EP-2", isinstance(body.get("id"), str) and body["id"], f"expected a string id, saw {body}")
    rule("EP-2", is_int(body.get("created")), f"expected an integer `created`, saw {body}")
    rule("REQ-1", body.get("model") == worker.model, f"expected model {worker.model!r}, saw {body}")
    choices = body.get("choices")
    rule("EP-2", isinstance(choices, list) and len(choices) == 1, f"expected one choice, saw {choices!r}")
    choice = choices[0]
    rule("EP-2", choice.get("index") == 0, f"expected choice index 0, saw {choice}")
    message = choice.get("message")
    rule(
        "EP-2",
        isinstance(message, dict) and message.get("role") == "assistant",
        f'expected a message with "role": "assistant", saw {message!r}',
    )
    rule(
        "EP-2",
        message.get("content") is None or isinstance(message["content"], str),
        f"expected message.content to be a string or null, saw {message!r}",
    )
    rule(
        "EP-2",
        choice.get("finish_reason") in FINISH_REASONS,
        f"expected finish_reason in {FINISH_REASONS}, saw {choice.get('finish_reason')!r}",
    )
    usage_object("USE-1", body.get("usage"), "non-stream chat answer")


@pytest.mark.rules("EP-3", "REQ-1", "USE-1")
def test_completions_answer(worker: Worker, exchanges: Exchanges) -> None:
    reply = exchanges.whole("completions")
    rule("EP-3", reply.status == 200, f"expected 200 to a valid completions request, saw {reply.brief()}")
    body = reply.json()
    rule("EP-3", body.get("object") == "text_completion", f'expected "object": "text_completion": {body}')
    rule("EP-3", isinstance(body.get("id"), str) and body["id"], f"expected a string id, saw {body}")
    rule("EP-3", is_int(body.get("created")), f"expected an integer `created`, saw {body}")
    rule("REQ-1", body.get("model") == worker.model, f"expected model {worker.model!r}, saw {body}")
    choices = body.get("choices")
    rule("EP-3", isinstance(choices, list) and len(choices) == 1, f"expected one choice, saw {choices!r}")
    choice = choices[0]
    rule("EP-3", isinstance(choice.get("text"), str), f"expected a string `text`, saw {choice}")
    rule(
        "EP-3",
        choice.get("finish_reason") in ("stop", "length"),
        f"expected finish_reason stop or length, saw {choice.get('finish_reason')!r}",
    )
    usage_object("USE-1", body.get("usage"), "non-stream completions answer")


@pytest.mark.rules("EP-4")
def test_health_is_200_while_serving(worker: Worker, exchanges: Exchanges) -> None:
    exchanges.whole("chat")  # the worker has just served a request, so it is ready
    reply = client.get(worker, "/health", timeout_s=5)
    rule(
        "EP-4",
        reply.status == 200,
        f"expected GET /health to be 200 on a serving worker, saw {reply.brief()}",
    )


@pytest.mark.rules("EP-6")
def test_the_openai_sdk_parses_every_answer(worker: Worker) -> None:
    sdk = openai.OpenAI(base_url=f"{worker.url}/v1", api_key="conformance", max_retries=0, timeout=60)
    try:
        models = [m.id for m in sdk.models.list()]
        rule("EP-6", worker.model in models, f"expected {worker.model!r} in models.list(), saw {models}")
        chat = sdk.chat.completions.create(**chat_body(worker.model))
        rule("EP-6", chat.choices[0].finish_reason is not None, f"expected a finish_reason, saw {chat}")
        chunks = list(
            sdk.chat.completions.create(
                **chat_body(worker.model), stream=True, stream_options={"include_usage": True}
            )
        )
        rule("EP-6", chunks and chunks[-1].usage is not None, f"expected a final usage chunk, saw {chunks}")
        text = sdk.completions.create(**completion_body(worker.model))
        rule("EP-6", text.choices[0].finish_reason is not None, f"expected a finish_reason, saw {text}")
        streamed = list(sdk.completions.create(**completion_body(worker.model), stream=True))
        rule("EP-6", streamed, "expected at least one completions chunk")
        try:
            sdk.chat.completions.create(**chat_body(f"no-such-model-{uuid.uuid4().hex[:8]}"))
        except openai.NotFoundError:
            pass
        except openai.APIError as exc:
            rule("EP-6", False, f"expected openai.NotFoundError for an unknown model, saw {exc!r}")
        else:
            rule("EP-6", False, "expected openai.NotFoundError for an unknown model, the call succeeded")
    except openai.APIError as exc:
        rule("EP-6", False, f"expected the SDK to parse the answer, it raised {exc!r}")
    finally:
        sdk.close()


@pytest.mark.rules("REQ-2")
@pytest.mark.parametrize(
    ("path", "fields"),
    [
        (CHAT_PATH, {"max_tokens": 3}),
        (CHAT_PATH, {"max_completion_tokens": 3, "max_tokens": 12}),
        (COMPLETIONS_PATH, {"max_tokens": 3}),
    ],
    ids=["chat-max_tokens", "chat-max_completion_tokens", "completions-max_tokens"],
)
def test_the_token_cap_is_honoured(worker: Worker, path: str, fields: dict[str, Any]) -> None:
    body = (chat_body if path == CHAT_PATH else completion_body)(worker.model, **fields)
    reply = client.post(worker, path, body)
    rule("REQ-2", reply.status == 200, f"expected 200 to {fields}, saw {reply.brief()}")
    answer = reply.json()
    usage = usage_object("USE-1", answer.get("usage"), f"answer to {fields}")
    rule(
        "REQ-2",
        usage["completion_tokens"] <= 3,
        f"{path} {fields}: expected completion_tokens <= 3, saw {usage['completion_tokens']}",
    )
    finish = answer["choices"][0].get("finish_reason")
    rule(
        "REQ-2",
        finish != "length" or usage["completion_tokens"] == 3,
        f'{path} {fields}: finish_reason "length" means the cap was reached: expected completion_tokens'
        f" == 3, saw {usage['completion_tokens']}",
    )


def _chat_text(worker: Worker, **extra: Any) -> tuple[str, str | None]:
    reply = client.post(worker, CHAT_PATH, chat_body(worker.model, max_tokens=16, **extra))
    rule("REQ-3", reply.status == 200, f"expected 200 to a chat request with {extra}, saw {reply.brief()}")
    choice = reply.json()["choices"][0]
    return choice["message"].get("content") or "", choice.get("finish_reason")


@pytest.mark.rules("REQ-3")
def test_stop_sequences_end_the_generation(worker: Worker) -> None:
    text, _ = _chat_text(worker)
    again, _ = _chat_text(worker)
    if text != again:
        inconclusive("REQ-3", f"two temperature-0 answers differ ({text!r} vs {again!r})")
    # A stop string from the middle of the answer, where it first occurs.
    candidates = [text[i : i + 3] for i in range(1, max(len(text) - 2, 1))]
    stops = [s for s in candidates if s.strip() and len(s) == 3]
    if not stops:
        inconclusive("REQ-3", f"the temperature-0 answer {text!r} is too short to pick a stop string from")
    stop = stops[len(stops) // 2]
    cut = text.find(stop)
    stopped, finish = _chat_text(worker, stop=[stop])
    detail = f"unconstrained answer {text!r}, stop {stop!r}: saw {stopped!r} with finish_reason {finish!r}"
    rule("REQ-3", stop not in stopped, f"expected the stop string not to appear; {detail}")
    rule("REQ-3", text.startswith(stopped), f"expected a prefix of the unconstrained answer; {detail}")
    rule("REQ-3", len(stopped) <= cut, f"expected the answer to end before offset {cut}; {detail}")
    rule("REQ-3", finish == "stop", f'expected finish_reason "stop"; {detail}')


@pytest.mark.rules("REQ-4")
@pytest.mark.parametrize("path", [CHAT_PATH, COMPLETIONS_PATH], ids=["chat", "completions"])
def test_unknown_fields_are_ignored(worker: Worker, path: str) -> None:
    extra = {"sluicegate_conformance_field": {"nested": [1, 2]}, "user": "conformance"}
    body = (chat_body if path == CHAT_PATH else completion_body)(worker.model, **extra)
    reply = client.post(worker, path, body)
    rule(
        "REQ-4", reply.status == 200, f"expected 200 to a request with an unknown field, saw {reply.brief()}"
    )


@pytest.mark.rules("REQ-5")
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_request_id_is_echoed(worker: Worker, stream: bool) -> None:
    request_id = f"conformance-{uuid.uuid4().hex}"
    reply = client.post(
        worker, CHAT_PATH, chat_body(worker.model, stream=stream), headers={"x-request-id": request_id}
    )
    rule("EP-2", reply.status == 200, f"expected 200, saw {reply.brief()}")
    seen = reply.headers.get("x-request-id")
    should("REQ-5", seen == request_id, f"expected x-request-id {request_id!r} back, saw {seen!r}")
