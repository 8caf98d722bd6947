"""The real `google-genai` SDK through a real gateway to the fake worker: what a user of Google's
Gemini API sees, and that what it is told about usage is what the gateway meters.

The fake worker answers `tok0 tok1 …` (8 tokens unless `x-fake-tokens` says otherwise) and counts
a prompt's whitespace-separated words as its tokens; the SDK sends its key as `x-goog-api-key`
and, in its 3.x versions, calls `/v1/models/{model}:generateContent` unless told `v1beta`.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from google import genai
from google.genai import errors, types

from gateway.model_table import ModelConfig, ModelTable, Timeouts
from tests.conftest import FAKE_MODEL, OTHER_MODEL, Gateway, GatewayFactory, default_table, worker_record
from tests.pipeline.support import usage_totals, wait_requests_metered

HELLO = "hello there gateway"  # 3 prompt tokens
DOWN_MODEL = "down-model"  # no endpoint: no worker can ever take it
REFUSING = "refusing-model"  # hosted_tools: refuse
MAX_BODY = 64 * 1024
WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="The weather in a city.",
    parameters=types.Schema(
        type=types.Type.OBJECT,
        properties={"x": types.Schema(type=types.Type.INTEGER), "city": types.Schema(type=types.Type.STRING)},
        required=["x"],
    ),
)


@pytest.fixture(scope="module")
def gw(make_gateway_module: GatewayFactory, fake_worker: str) -> Iterator[Gateway]:
    table = default_table(fake_worker)
    down = ModelConfig(name=DOWN_MODEL, endpoints=(), timeouts=Timeouts())
    refusing = ModelConfig(
        name=REFUSING, upstream_model=FAKE_MODEL, endpoints=(fake_worker,), hosted_tools="refuse"
    )
    with make_gateway_module(ModelTable((*table.models, down, refusing)), max_body_bytes=MAX_BODY) as gateway:
        yield gateway


def sdk(gw: Gateway, key: str, version: str = "v1") -> genai.Client:
    return genai.Client(api_key=key, http_options=types.HttpOptions(base_url=gw.url, api_version=version))


@pytest.fixture
def key(gw: Gateway) -> dict[str, Any]:
    return gw.new_key()


@pytest.fixture
def client(gw: Gateway, key: dict[str, Any]) -> Iterator[genai.Client]:
    with sdk(gw, key["key"]) as made:
        yield made


def _metered(gw: Gateway, team: str, requests: int) -> tuple[int, int]:
    totals = wait_requests_metered(gw, team, requests)
    return totals["prompt_tokens"], totals["completion_tokens"]


def _headers(response: Any) -> dict[str, str]:
    return dict(response.sdk_http_response.headers)


@pytest.mark.parametrize("version", ["v1", "v1beta"])
def test_generate_content_answers_and_meters_what_it_says(
    gw: Gateway, key: dict[str, Any], version: str
) -> None:
    with sdk(gw, key["key"], version) as made:
        response = made.models.generate_content(
            model=FAKE_MODEL,
            contents=HELLO,
            config=types.GenerateContentConfig(
                http_options=types.HttpOptions(headers={"x-fake-tokens": "5"})
            ),
        )
    assert response.text == "tok0 tok1 tok2 tok3 tok4 "
    assert response.candidates is not None
    assert response.candidates[0].finish_reason == types.FinishReason.STOP
    assert response.model_version == FAKE_MODEL
    assert response.response_id
    usage = response.usage_metadata
    assert usage is not None
    assert (usage.prompt_token_count, usage.candidates_token_count, usage.total_token_count) == (3, 5, 8)
    assert _metered(gw, key["team"], 1) == (3, 5)


def test_max_output_tokens_ends_the_answer_with_max_tokens(client: genai.Client) -> None:
    response = client.models.generate_content(
        model="default", contents=HELLO, config=types.GenerateContentConfig(max_output_tokens=3)
    )
    assert response.text == "tok0 tok1 tok2 "
    assert response.candidates is not None
    assert response.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS


def test_system_history_images_and_generation_config_reach_the_worker_as_chat(
    client: genai.Client, fake_worker: str
) -> None:
    response = client.models.generate_content(
        model=FAKE_MODEL,
        contents=[
            types.Content(role="user", parts=[types.Part(text="one")]),
            types.Content(role="model", parts=[types.Part(text="two")]),
            types.Content(
                role="user",
                parts=[
                    types.Part(text="what is this"),
                    types.Part.from_bytes(data=b"\x89PNG", mime_type="image/png"),
                    types.Part.from_uri(file_uri="https://example.com/a.png", mime_type="image/png"),
                ],
            ),
        ],
        config=types.GenerateContentConfig(
            system_instruction="be brief",
            max_output_tokens=16,
            temperature=0.5,
            top_p=0.9,
            top_k=40,
            seed=7,
            stop_sequences=["END"],
            response_mime_type="application/json",
            thinking_config=types.ThinkingConfig(thinking_budget=0),
        ),
    )
    sent = worker_record(fake_worker, _headers(response)["x-sluicegate-request-id"])
    assert sent is not None
    body = sent["body"]
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "one"}]},
        {"role": "assistant", "content": "two"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            ],
        },
    ]
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["top_k"]) == (16, 0.5, 0.9, 40)
    assert (body["seed"], body["stop"], body["stream"]) == (7, ["END"], False)
    assert body["response_format"] == {"type": "json_object"}
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    # The key is the gateway's business, never the worker's.
    assert "x-goog-api-key" not in {k.lower() for k in sent["headers"]}


def test_stream_sends_the_text_as_it_comes_and_meters_the_usage_it_reports(
    gw: Gateway, key: dict[str, Any], client: genai.Client
) -> None:
    chunks = list(
        client.models.generate_content_stream(
            model=FAKE_MODEL,
            contents=HELLO,
            config=types.GenerateContentConfig(
                http_options=types.HttpOptions(headers={"x-fake-tokens": "4"})
            ),
        )
    )
    texts = [chunk.text for chunk in chunks]
    assert texts == ["tok0 ", "tok1 ", "tok2 ", "tok3 ", None]
    last = chunks[-1]
    assert last.candidates is not None
    assert last.candidates[0].finish_reason == types.FinishReason.STOP
    assert last.usage_metadata is not None
    told = (last.usage_metadata.prompt_token_count, last.usage_metadata.candidates_token_count)
    assert told == (3, 4)
    assert {chunk.response_id for chunk in chunks} == {last.response_id}
    assert _metered(gw, key["team"], 1) == told


def _raw(
    gw: Gateway, method: str, path: str, body: Any = None, **headers: str
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(gw.url)
    assert parts.hostname is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        data = None if body is None else orjson.dumps(body)
        conn.request(method, path, body=data, headers={"content-type": "application/json", **headers})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def test_a_stream_without_alt_sse_is_one_json_array_and_the_key_may_come_in_the_query(
    gw: Gateway, key: dict[str, Any], all_logs: list[str]
) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": HELLO}]}]}
    status, headers, raw = _raw(
        gw,
        "POST",
        f"/v1beta/models/{FAKE_MODEL}:streamGenerateContent?key={key['key']}",
        body,
        **{"x-fake-tokens": "3"},
    )
    assert status == 200, raw
    assert headers["content-type"] == "application/json"
    chunks = orjson.loads(raw)
    assert [c["candidates"][0]["content"]["parts"] for c in chunks] == [
        [{"text": "tok0 "}],
        [{"text": "tok1 "}],
        [{"text": "tok2 "}],
        [],
    ]
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert chunks[-1]["usageMetadata"] == {
        "promptTokenCount": 3,
        "candidatesTokenCount": 3,
        "totalTokenCount": 6,
    }
    assert _metered(gw, key["team"], 1) == (3, 3)
    # A key in the URL is in no log line.
    assert not [line for line in all_logs if key["key"] in line]


def test_count_tokens_answers_the_gateways_estimate(client: genai.Client) -> None:
    counted = client.models.count_tokens(model=FAKE_MODEL, contents="x" * 400)
    assert counted.total_tokens is not None
    assert 100 <= counted.total_tokens <= 120  # ~4 characters a token, the JSON around it included


def test_a_function_calling_round_trip(client: genai.Client, fake_worker: str) -> None:
    tools: list[Any] = [types.Tool(function_declarations=[WEATHER])]
    config = types.GenerateContentConfig(
        tools=tools,
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        tool_config=types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(mode=types.FunctionCallingConfigMode.ANY)
        ),
        http_options=types.HttpOptions(headers={"x-fake-tool-call": "get_weather"}),
    )
    question = types.Content(role="user", parts=[types.Part(text="weather in Oslo?")])
    response = client.models.generate_content(model=FAKE_MODEL, contents=[question], config=config)
    sent = worker_record(fake_worker, _headers(response)["x-sluicegate-request-id"])
    assert sent is not None
    (tool,) = sent["body"]["tools"]
    assert tool == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"x": {"type": "integer"}, "city": {"type": "string"}},
                "required": ["x"],
            },
        },
    }
    assert sent["body"]["tool_choice"] == "required"
    (call,) = response.function_calls or []
    assert (call.name, call.args) == ("get_weather", {"x": 1})
    assert call.id
    assert response.candidates is not None
    answered = types.Part.from_function_response(name="get_weather", response={"output": "sunny"})
    follow_up = client.models.generate_content(
        model=FAKE_MODEL,
        contents=[question, response.candidates[0].content, types.Content(role="user", parts=[answered])],
        config=types.GenerateContentConfig(tools=tools),
    )
    assert follow_up.text
    sent = worker_record(fake_worker, _headers(follow_up)["x-sluicegate-request-id"])
    assert sent is not None
    assert sent["body"]["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"x":1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]


def test_a_streamed_function_call_comes_whole_in_the_last_chunk(client: genai.Client) -> None:
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[WEATHER])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        http_options=types.HttpOptions(headers={"x-fake-tool-call": "get_weather"}),
    )
    chunks = list(client.models.generate_content_stream(model=FAKE_MODEL, contents=HELLO, config=config))
    calls = [call for chunk in chunks for call in chunk.function_calls or []]
    assert [(call.name, call.args) for call in calls] == [("get_weather", {"x": 1})]
    assert chunks[-1].function_calls == calls


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_becomes_thought_parts(client: genai.Client, stream: bool) -> None:
    config = types.GenerateContentConfig(
        thinking_config=types.ThinkingConfig(include_thoughts=True),
        http_options=types.HttpOptions(headers={"x-fake-tokens": "4", "x-fake-reasoning": "2"}),
    )
    if stream:
        chunks = list(client.models.generate_content_stream(model=FAKE_MODEL, contents=HELLO, config=config))
    else:
        chunks = [client.models.generate_content(model=FAKE_MODEL, contents=HELLO, config=config)]
    parts = [part for chunk in chunks for part in (chunk.candidates or [])[0].content.parts or []]  # type: ignore[union-attr]
    thought = "".join(p.text or "" for p in parts if p.thought)
    answer = "".join(p.text or "" for p in parts if not p.thought)
    assert (thought, answer) == ("tok0 tok1 ", "tok2 tok3 ")


def test_a_hosted_tool_is_dropped_and_named_or_refused(gw: Gateway, key: dict[str, Any]) -> None:
    body = {"contents": [{"parts": [{"text": HELLO}]}], "tools": [{"googleSearch": {}}], "labels": {"a": "b"}}
    path = f"/v1beta/models/{FAKE_MODEL}:generateContent"
    status, headers, raw = _raw(gw, "POST", path, body, **{"x-goog-api-key": key["key"]})
    assert status == 200, raw
    assert headers["x-sluicegate-ignored"] == "tools[0]:googleSearch,labels"
    path = f"/v1beta/models/{REFUSING}:generateContent"
    status, headers, raw = _raw(gw, "POST", path, body, **{"x-goog-api-key": key["key"]})
    assert status == 400
    error = orjson.loads(raw)["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert "hosted_tools: refuse" in error["message"]


def test_a_mid_stream_failure_is_the_sdks_error(client: genai.Client) -> None:
    received: list[str | None] = []
    config = types.GenerateContentConfig(
        http_options=types.HttpOptions(headers={"x-fake-error-event-after": "2"})
    )
    stream = client.models.generate_content_stream(model=FAKE_MODEL, contents=HELLO, config=config)
    with pytest.raises(errors.APIError) as failed:
        received.extend(chunk.text for chunk in stream)
    assert received == ["tok0 ", "tok1 "]
    assert failed.value.status == "UNAVAILABLE"
    assert "injected error" in str(failed.value)


def _raised(call: Any) -> errors.APIError:
    try:
        call()
    except errors.APIError as error:
        return error
    raise AssertionError("the request succeeded")


def test_every_refusal_is_the_sdks_own_error_with_googles_status(gw: Gateway, key: dict[str, Any]) -> None:
    def generate(made: genai.Client, model: str = FAKE_MODEL, contents: str = HELLO, **config: Any) -> Any:
        return lambda: made.models.generate_content(
            model=model, contents=contents, config=types.GenerateContentConfig(**config)
        )

    def fake(**headers: str) -> types.HttpOptions:
        return types.HttpOptions(headers=headers)

    limited = gw.new_key(rpm=1)
    other_only = gw.new_key(models=[OTHER_MODEL])
    with (
        sdk(gw, key["key"]) as made,
        sdk(gw, "sk-wrong") as stranger,
        sdk(gw, other_only["key"]) as other,
        sdk(gw, limited["key"]) as slow,
    ):
        cases = [
            (generate(made, candidate_count=99), errors.ClientError, 400, "INVALID_ARGUMENT"),
            (generate(stranger), errors.ClientError, 401, "UNAUTHENTICATED"),
            (generate(other), errors.ClientError, 403, "PERMISSION_DENIED"),
            (generate(made, model="no-such-model"), errors.ClientError, 404, "NOT_FOUND"),
            (generate(made, contents="x" * MAX_BODY), errors.ClientError, 413, "INVALID_ARGUMENT"),
            (generate(made, model=DOWN_MODEL), errors.ServerError, 503, "UNAVAILABLE"),
            (
                generate(made, http_options=fake(**{"x-fake-status": "500"})),
                errors.ServerError,
                502,
                "UNAVAILABLE",
            ),
            (
                generate(made, http_options=fake(**{"x-fake-status": "422"})),
                errors.ClientError,
                422,
                "INVALID_ARGUMENT",
            ),
        ]
        generate(slow)()
        cases.append((generate(slow), errors.ClientError, 429, "RESOURCE_EXHAUSTED"))
        for call, kind, status, name in cases:
            error = _raised(call)
            assert type(error) is kind, (kind, error)
            assert (error.code, error.status) == (status, name), error
            assert error.message
        refused = _raised(generate(made, candidate_count=99))
        assert "candidateCount" in str(refused)
        throttled = _raised(generate(slow))
        assert throttled.response is not None
        delay = int(throttled.response.headers["retry-after"])
        assert delay >= 1
        assert throttled.details["error"]["details"] == [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{delay}s"}
        ]


def test_the_model_listings_show_the_keys_models_only(gw: Gateway) -> None:
    other_only = gw.new_key(models=[OTHER_MODEL])
    with sdk(gw, other_only["key"], "v1beta") as made:
        names = [model.name for model in made.models.list()]
        assert names == [f"models/{OTHER_MODEL}"]
        shown = made.models.get(model=OTHER_MODEL)
        assert shown.name == f"models/{OTHER_MODEL}"
        hidden = _raised(lambda: made.models.get(model=FAKE_MODEL))
        assert (hidden.code, hidden.status) == (404, "NOT_FOUND")
    # OpenAI's listing keeps its own path and shape.
    status, _, raw = _raw(gw, "GET", "/v1/models", authorization=f"Bearer {other_only['key']}")
    assert status == 200
    assert orjson.loads(raw)["object"] == "list"


def test_an_unknown_method_is_a_404_in_googles_envelope(gw: Gateway, key: dict[str, Any]) -> None:
    status, _, raw = _raw(
        gw, "POST", f"/v1beta/models/{FAKE_MODEL}:embedContent", {}, **{"x-goog-api-key": key["key"]}
    )
    assert status == 404
    assert orjson.loads(raw)["error"]["status"] == "NOT_FOUND"
    status, _, raw = _raw(gw, "GET", "/v1beta/nothing", **{"x-goog-api-key": key["key"]})
    assert status == 404
    assert orjson.loads(raw)["error"]["status"] == "NOT_FOUND"


def test_a_client_that_leaves_mid_stream_is_metered_with_what_it_was_sent(
    gw: Gateway, key: dict[str, Any], fake_worker: str
) -> None:
    parts = urlsplit(gw.url)
    assert parts.hostname is not None
    request_id = f"leave-{key['id']}"
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    received = 0
    try:
        conn.request(
            "POST",
            f"/v1beta/models/{FAKE_MODEL}:streamGenerateContent?alt=sse",
            body=orjson.dumps({"contents": [{"parts": [{"text": HELLO}]}]}),
            headers={
                "content-type": "application/json",
                "x-goog-api-key": key["key"],
                "x-request-id": request_id,
                "x-fake-tokens": "300",
                "x-fake-token-delay-ms": "20",
            },
        )
        response = conn.getresponse()
        assert response.status == 200
        while received < 5:
            line = response.readline()
            assert line, "the stream ended before the client left"
            if line.startswith(b"data: "):
                received += 1
        response.close()
    finally:
        conn.close()
    deadline = time.monotonic() + 15
    record = worker_record(fake_worker, request_id)
    while (record is None or record["state"] != "disconnected") and time.monotonic() < deadline:
        time.sleep(0.02)
        record = worker_record(fake_worker, request_id)
    assert record is not None
    assert record["state"] == "disconnected"
    totals = wait_requests_metered(gw, key["team"], 1)
    assert totals["prompt_tokens"] == 3
    assert received <= totals["completion_tokens"] <= record["tokens_sent"] < 300
    assert usage_totals(gw, key["team"])["requests"] == 1


def test_every_gateway_error_has_a_google_status() -> None:
    from gateway.apis.gemini.errors import status_name
    from gateway.errors import ErrorCode, GatewayError

    assert {code: status_name(GatewayError(code, "x")) for code in ErrorCode}  # none raises KeyError


def test_a_function_response_sent_twice_reaches_the_worker_once(
    gw: Gateway, key: dict[str, Any], fake_worker: str
) -> None:
    """Gemini CLI 0.61 resumes a session with a call's response twice in one turn."""
    call = {"functionCall": {"id": "c1", "name": "read_file", "args": {"file_path": "a"}}}
    answer = {"functionResponse": {"id": "c1", "name": "read_file", "response": {"output": "text"}}}
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "read a"}]},
            {"role": "model", "parts": [{**call, "thoughtSignature": "skip_thought_signature_validator"}]},
            {"role": "user", "parts": [answer, answer]},
        ]
    }
    path = f"/v1beta/models/{FAKE_MODEL}:generateContent"
    status, headers, raw = _raw(gw, "POST", path, body, **{"x-goog-api-key": key["key"]})
    assert status == 200, raw
    assert headers["x-sluicegate-ignored"] == "contents[2].parts[1]:functionResponse"
    sent = worker_record(fake_worker, headers["x-sluicegate-request-id"])
    assert sent is not None
    assert [m["role"] for m in sent["body"]["messages"]] == ["user", "assistant", "tool"]
    assert sent["body"]["messages"][2] == {"role": "tool", "tool_call_id": "c1", "content": "text"}


def test_v1beta_requests_are_counted_by_api(gw: Gateway, key: dict[str, Any]) -> None:
    with sdk(gw, key["key"], "v1beta") as made:
        made.models.generate_content(model=FAKE_MODEL, contents=HELLO)
    _, _, raw = _raw(gw, "GET", "/metrics")
    counted = [
        line
        for line in raw.decode().splitlines()
        if line.startswith("sluicegate_requests_total{") and f'team="{key["team"]}"' in line
    ]
    assert len(counted) == 1, counted
    assert 'api="gemini"' in counted[0]
    assert counted[0].endswith(" 1.0")
