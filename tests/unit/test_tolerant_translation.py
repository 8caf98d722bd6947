"""Tolerant translation, strict governance (issue 20): what agents send is served, what has no
equivalent is dropped visibly, and the pieces each mapping is made of (chat_shape, tool_names,
ignored, model_rules), as pure functions."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.apis import responses
from gateway.apis.anthropic.dialect import MESSAGES, MessagesCall
from gateway.apis.anthropic.request import translate
from gateway.apis.anthropic.stream import AnthropicStream
from gateway.apis.responses.call import ResponsesCall, parse_call
from gateway.apis.responses.dialect import RESPONSES
from gateway.apis.responses.stream import ResponsesStream
from gateway.errors import ConfigError, ErrorCode, GatewayError
from gateway.http.context import RequestContext
from gateway.model_file import parse_model
from gateway.model_table import NATIVE, ModelConfig, Protocols
from gateway.observability.metrics import Metrics
from gateway.proxy.translation import ignored, model_rules, native
from gateway.proxy.translation.chat_shape import fold_chat, fold_messages

SYS = {"role": "system", "content": "s"}


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


# --- chat_shape ---------------------------------------------------------------------------------


def test_leading_system_messages_become_one() -> None:
    folded = fold_chat([SYS, {"role": "system", "content": "t"}, _user("u")])
    assert folded == [{"role": "system", "content": "s\n\nt"}, _user("u")]


def test_a_later_system_message_folds_into_the_next_user_turn_first() -> None:
    assistant = {"role": "assistant", "content": "a"}
    folded = fold_chat([SYS, _user("u1"), assistant, {"role": "system", "content": "late"}, _user("u2")])
    # Never into the leading system prompt: the prefix stays the same turn after turn.
    assert folded == [SYS, _user("u1"), assistant, _user("late\n\nu2")]


def test_a_later_system_message_with_no_user_after_it_joins_the_user_before_it() -> None:
    # Claude Code's shape: [user (blocks), system] with nothing after.
    user = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    folded = fold_chat([SYS, user, {"role": "system", "content": "env"}])
    assert folded == [
        SYS,
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "env"}]},
    ]


def test_a_later_system_message_between_assistant_turns_becomes_a_user_message_in_place() -> None:
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]}
    tool = {"role": "tool", "tool_call_id": "c", "content": "r"}
    after = {"role": "assistant", "content": "done"}
    folded = fold_chat([_user("u"), call, {"role": "system", "content": "x"}, tool, after])
    # After the tool result it precedes (a tool message must follow its call).
    assert folded == [_user("u"), call, tool, _user("x"), after]


def test_an_anthropic_body_folds_in_its_own_shape_tool_results_first() -> None:
    body = {
        "system": "top",
        "messages": [
            {
                "role": "system",
                "content": [{"type": "text", "text": "lead", "cache_control": {"type": "ephemeral"}}],
            },
            _user("u"),
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {}}]},
            {"role": "system", "content": "late"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]},
        ],
    }
    folded, changed = fold_messages(body)
    assert changed
    assert folded["system"] == [
        {"type": "text", "text": "top"},
        {"type": "text", "text": "lead", "cache_control": {"type": "ephemeral"}},
    ]
    assert [m["role"] for m in folded["messages"]] == ["user", "assistant", "user"]
    assert folded["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t", "content": "r"},
        {"type": "text", "text": "late"},
    ]
    assert fold_messages({"messages": [_user("u")]}) == ({"messages": [_user("u")]}, False)


# --- Messages ---------------------------------------------------------------------------------------


def _claude_code_body(**extra: Any) -> dict[str, Any]:
    """The shape Claude Code 2.1.332 sends (captured), texts replaced."""
    return {
        "model": "m",
        "max_tokens": 32000,
        "stream": True,
        "system": [
            {"type": "text", "text": "billing header"},
            {"type": "text", "text": "you are an agent", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>r</system-reminder>"},
                    {"type": "text", "text": "say hi"},
                ],
            },
            {
                "role": "system",
                "content": [
                    {"type": "text", "text": "# Environment", "cache_control": {"type": "ephemeral"}}
                ],
            },
        ],
        "tools": [
            {"name": "Bash", "description": "d", "input_schema": {"type": "object"}},
            {"name": "Later", "description": "d", "input_schema": {"type": "object"}, "defer_loading": True},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 8},
            {
                "type": "text_editor_20250728",
                "name": "str_replace_based_edit_tool",
                "input_schema": {"type": "object"},
            },
        ],
        "metadata": {"user_id": '{"session_id":"abc"}'},
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        **extra,
    }


def test_a_claude_code_turn_is_translated_with_what_it_dropped_named() -> None:
    translated = translate(orjson.dumps(_claude_code_body(mcp_servers=[], container="c")))
    messages = translated.chat["messages"]
    assert messages[0] == {"role": "system", "content": "billing header\nyou are an agent"}
    assert messages[1]["role"] == "user"
    assert messages[1]["content"][-1] == {"type": "text", "text": "# Environment"}
    assert len(messages) == 2
    assert [t["function"]["name"] for t in translated.chat["tools"]] == [
        "Bash",
        "Later",
        "str_replace_based_edit_tool",  # carries a schema: a function the client runs
    ]
    assert translated.chat["chat_template_kwargs"] == {"enable_thinking": True}
    assert translated.user == '{"session_id":"abc"}'
    assert translated.ignored == (
        "tools[2]:web_search_20250305",
        "context_management",
        "output_config",
        "mcp_servers",
        "container",
    )


def test_unknown_blocks_are_dropped_unless_nothing_is_left() -> None:
    body = _claude_code_body()
    body["messages"] = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "q"},
                {"type": "document", "source": {"type": "base64", "data": "x"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "server_tool_use", "id": "s"},
                {"type": "text", "text": "a", "citations": []},
            ],
        },
        {"role": "user", "content": [{"type": "document", "source": {"type": "text", "data": "plain doc"}}]},
    ]
    translated = translate(orjson.dumps(body))
    assert "messages[0].content[1]:document" in translated.ignored
    assert "messages[1].content[0]:server_tool_use" in translated.ignored
    assert translated.chat["messages"][-1] == {
        "role": "user",
        "content": [{"type": "text", "text": "plain doc"}],
    }
    body["messages"] = [{"role": "user", "content": [{"type": "mystery"}]}]
    with pytest.raises(GatewayError) as caught:
        translate(orjson.dumps(body))
    assert caught.value.param == "messages"


def test_a_role_that_is_no_role_is_a_400_naming_it_and_developer_is_system() -> None:
    body = _claude_code_body()
    body["messages"] = [{"role": "critic", "content": "x"}]
    with pytest.raises(GatewayError) as caught:
        translate(orjson.dumps(body))
    assert caught.value.param == "messages[0].role"
    assert "'critic'" in caught.value.message
    body["messages"] = [{"role": "developer", "content": "d"}, _user("u")]
    assert translate(orjson.dumps(body)).chat["messages"][0]["content"].endswith("d")


def test_count_tokens_takes_the_same_body() -> None:
    body = _claude_code_body()
    del body["max_tokens"]
    assert translate(orjson.dumps(body), needs_max_tokens=False).prompt_estimate > 0


def test_an_empty_messages_answer_still_carries_one_text_block() -> None:
    call = MessagesCall(translate(orjson.dumps(_claude_code_body(stream=False))))
    answer = {
        "choices": [{"message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 0},
    }
    whole = orjson.loads(MESSAGES.whole(call, answer, b"", "m"))
    assert whole["content"] == [{"type": "text", "text": ""}]
    stream = AnthropicStream(message_id="msg_1", model="m", prompt_estimate=3, stop_sequences=())
    stream.event({"choices": [{"delta": {"role": "assistant"}, "finish_reason": "stop"}]}, b"", b"")
    events = stream.done().decode()
    assert (
        events.index("content_block_start")
        < events.index("content_block_stop")
        < events.index("message_delta")
    )
    assert '"content_block":{"type":"text","text":""}' in events


# --- Responses --------------------------------------------------------------------------------------


def _codex_body(**extra: Any) -> dict[str, Any]:
    """The shape Codex 0.169.0 sends, texts replaced."""
    return {
        "model": "m",
        "instructions": "codex instructions",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "perms"}]},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "env"}]},
            {
                "type": "message",
                "role": "user",
                "id": "m1",
                "content": [{"type": "input_text", "text": "hi"}],
            },
        ],
        "tools": [
            {"type": "function", "name": "shell", "strict": False, "parameters": {"type": "object"}},
            {"type": "function", "name": "multi_agent_v1__spawn", "parameters": {"type": "object"}},
            {
                "type": "namespace",
                "name": "multi_agent_v1",
                "description": "agents",
                "tools": [{"type": "function", "name": "spawn", "parameters": {"type": "object"}}],
            },
            {"type": "web_search", "external_web_access": False},
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "session",
        "client_metadata": {"x": "y"},
        **extra,
    }


def _flat_name(call: ResponsesCall) -> str:
    (flat,) = call.names.back
    return flat


def test_a_codex_turn_has_one_system_message_flat_tools_and_named_drops() -> None:
    call = parse_call(orjson.dumps(_codex_body()))
    assert call.chat["messages"] == [
        {"role": "system", "content": "codex instructions\n\nperms\n\nenv"},
        {"role": "user", "content": "hi"},
    ]
    names = [t["function"]["name"] for t in call.chat["tools"]]
    # The flat name is unique even against a function already called that.
    assert names == ["shell", "multi_agent_v1__spawn", "multi_agent_v1__spawn_2"]
    assert call.names.back == {"multi_agent_v1__spawn_2": ("multi_agent_v1", "spawn")}
    assert set(call.ignored) == {"tools[3]:web_search", "reasoning.summary", "include", "client_metadata"}
    assert call.chat["reasoning_effort"] == "medium"


def test_a_namespaced_call_round_trips_in_input_whole_answers_and_streams() -> None:
    history = [
        {"type": "message", "role": "user", "content": "hi"},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "spawn",
            "namespace": "multi_agent_v1",
            "arguments": "{}",
        },
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
    ]
    call = parse_call(orjson.dumps(_codex_body(input=history)))
    flat = _flat_name(call)
    assert call.chat["messages"][2]["tool_calls"][0]["function"]["name"] == flat
    assert "input[3]:web_search_call" in call.ignored

    answer = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c2", "type": "function", "function": {"name": flat, "arguments": "{}"}}
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }
    whole = orjson.loads(RESPONSES.whole(call, answer, b"", "m"))
    (item,) = whole["output"]
    assert (item["name"], item["namespace"], item["call_id"]) == ("spawn", "multi_agent_v1", "c2")

    stream = ResponsesStream(call, "m")
    chunk = {
        "choices": [
            {
                "delta": {
                    "tool_calls": [{"index": 0, "id": "c3", "function": {"name": flat, "arguments": "{}"}}]
                }
            }
        ]
    }
    out = stream.event(chunk, b"", b"") + stream.event(
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}, b"", b""
    )
    out += stream.done()
    events = [orjson.loads(line[6:]) for line in out.split(b"\n") if line.startswith(b"data: ")]
    added = next(e for e in events if e["type"] == "response.output_item.added")
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    completed = events[-1]
    assert (added["item"]["name"], added["item"]["namespace"]) == ("spawn", "multi_agent_v1")
    assert done["name"] == "spawn"
    assert completed["response"]["output"][0]["namespace"] == "multi_agent_v1"


def test_an_empty_responses_answer_is_one_message_item_whole_and_streamed() -> None:
    call = parse_call(orjson.dumps(_codex_body(stream=False)))
    answer = {"choices": [{"message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}]}
    whole = orjson.loads(RESPONSES.whole(call, answer, b"", "m"))
    assert [i["type"] for i in whole["output"]] == ["message"]
    stream = ResponsesStream(call, "m")
    out = stream.event({"choices": [{"delta": {"role": "assistant"}, "finish_reason": "stop"}]}, b"", b"")
    events = [
        orjson.loads(line[6:]) for line in (out + stream.done()).split(b"\n") if line.startswith(b"data: ")
    ]
    kinds = [e["type"] for e in events]
    assert "response.output_item.added" in kinds
    assert "response.output_item.done" in kinds
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == ""


# --- per-model rules: hosted_tools, native_normalise ------------------------------------------------


def test_hosted_tools_are_dropped_by_default_and_refused_when_the_model_says_so() -> None:
    call = parse_call(orjson.dumps(_codex_body()))
    assert model_rules.apply(call, ModelConfig(name="m")) is call
    with pytest.raises(GatewayError) as caught:
        model_rules.apply(call, ModelConfig(name="m", hosted_tools="refuse"))
    assert caught.value.code is ErrorCode.INVALID_REQUEST
    assert caught.value.param == "tools[3].type"
    assert "web_search" in caught.value.message
    assert caught.value.headers[ignored.IGNORED_HEADER].startswith("tools[3]:web_search")
    messages = MessagesCall(translate(orjson.dumps(_claude_code_body())))
    with pytest.raises(GatewayError):
        model_rules.apply(messages, ModelConfig(name="m", hosted_tools="refuse"))


def _native(body: dict[str, Any], api: str) -> native.NativeCall:
    raw = orjson.dumps(body)
    model = ModelConfig(name="m", protocols=Protocols(**{api: NATIVE}), native_normalise=True)
    call = MESSAGES.parse(raw, {"m"}) if api == "messages" else RESPONSES.parse(raw, {"m"})
    assert isinstance(call, native.NativeCall)
    normalised = model_rules.apply(call, model)
    assert isinstance(normalised, native.NativeCall)
    return normalised


def test_native_normalise_folds_a_messages_body() -> None:
    call = _native(_claude_code_body(), "messages")
    assert [m["role"] for m in call.body["messages"]] == ["user"]
    assert call.body["messages"][0]["content"][-1]["text"] == "# Environment"
    assert call.body["output_config"] == {"effort": "high"}  # the native worker reads the rest itself
    untouched = ModelConfig(name="m", protocols=Protocols(messages=NATIVE))
    raw_call = MESSAGES.parse(orjson.dumps(_claude_code_body()), {"m"})
    assert model_rules.apply(raw_call, untouched) is raw_call


def test_native_normalise_flattens_responses_tools_and_names_calls_back() -> None:
    history = [
        {"type": "message", "role": "user", "content": "hi"},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "spawn",
            "namespace": "multi_agent_v1",
            "arguments": "{}",
        },
    ]
    call = _native(_codex_body(input=history), "responses")
    assert call.names is not None
    flat = next(iter(call.names.back))
    assert [t.get("name") for t in call.body["tools"]] == ["shell", "multi_agent_v1__spawn", flat]
    assert call.body["input"][1] == {
        "type": "function_call",
        "call_id": "c1",
        "name": flat,
        "arguments": "{}",
    }
    assert call.ignored == ("tools[3]:web_search",)

    item = {"type": "function_call", "id": "fc", "call_id": "c", "name": flat, "arguments": "{}"}
    answer = {
        "object": "response",
        "model": "w",
        "output": [item],
        "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
    }
    whole = orjson.loads(RESPONSES.whole(call, answer, b"", "m"))
    assert (whole["output"][0]["name"], whole["output"][0]["namespace"]) == ("spawn", "multi_agent_v1")

    relay = RESPONSES.stream(call, "m")
    added = {"type": "response.output_item.added", "sequence_number": 3, "output_index": 0, "item": item}
    event = relay.event(added, b"", b"untouched")
    assert b'"namespace":"multi_agent_v1"' in event
    plain = {"type": "response.output_text.delta", "sequence_number": 4, "delta": "x"}
    assert relay.event(plain, b"", b"raw bytes") == b"raw bytes"
    done = {
        "type": "response.function_call_arguments.done",
        "sequence_number": 5,
        "name": flat,
        "arguments": "{}",
    }
    assert b'"name":"spawn"' in relay.event(done, b"", b"")


# --- what was dropped, made visible ---------------------------------------------------------------


def test_labels_are_a_bounded_set_and_the_header_is_sanitised_and_bounded() -> None:
    # A tool's known types are the ones the client APIs declare (gateway.apis: `hosted_tools`).
    hosted = responses.API.hosted_tools
    assert ignored.label("tools[8]:web_search", hosted) == "tools:web_search"
    assert ignored.label("tools[8]:my_own_thing", hosted) == "tools:other"
    assert ignored.label("tools[8]:web_search") == "tools:other"
    assert ignored.label("output_config") == "output_config"
    assert ignored.label("whatever_the_client_invents") == "other"
    assert ignored.label("messages[3].content[1]:document") == "messages.content:document"
    assert ignored.entry("tools[1]", "evil\r\nx-injected: 1") == "tools[1]:evil??x-injected:?1"
    value = ignored.header_value(f"field_{i:04d}" for i in range(500))
    assert len(value) <= 520
    assert value.endswith(",...")


def test_record_counts_by_api_and_label_and_notes_the_header() -> None:
    metrics = Metrics()
    ctx = RequestContext(request_id="r1")
    ignored.record(
        ctx, "responses", ("tools[3]:web_search", "zzz", "include"), metrics, responses.API.hosted_tools
    )
    assert ctx.ignored == ("tools[3]:web_search", "zzz", "include")
    for field in ("tools:web_search", "other", "include"):
        assert (
            metrics.registry.get_sample_value(
                "sluicegate_ignored_fields_total", {"api": "responses", "field": field}
            )
            == 1
        )


def test_the_model_table_reads_and_checks_the_translation_settings() -> None:
    entry = {"name": "m", "endpoints": [{"url": "http://w:8000"}]}
    model = parse_model({**entry, "hosted_tools": "refuse", "native_normalise": True}, "models[0]")
    assert (model.hosted_tools, model.native_normalise) == ("refuse", True)
    assert (parse_model(entry, "m").hosted_tools, parse_model(entry, "m").native_normalise) == ("drop", False)
    with pytest.raises(ConfigError, match="hosted_tools"):
        parse_model({**entry, "hosted_tools": "maybe"}, "models[0]")
    with pytest.raises(ConfigError, match="native_normalise"):
        parse_model({**entry, "native_normalise": "yes"}, "models[0]")
