"""TOOL rules: OpenAI `tools` / `tool_choice` in, `tool_calls` out, streamed the way vLLM streams them.

With random weights (the tiny vLLM model) the arguments can be junk, so the MUST rules look at the
protocol only; whether the arguments are a JSON object is a SHOULD (TOOL-4).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from workers.conformance import client
from workers.conformance.checks import error_envelope
from workers.conformance.client import Stream, Worker
from workers.conformance.conftest import CHAT_PATH, chat_body
from workers.conformance.rules import rule, should, violated

TOOL_NAME = "get_weather"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": "Get the current weather in a city.",
            # Bounded, so a model with random weights still ends its arguments.
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]
NAMED = {"type": "function", "function": {"name": TOOL_NAME}}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris? Use the tool."}]


def _tool_body(model: str, tool_choice: Any, prompt: str | None = None, **extra: Any) -> dict[str, Any]:
    messages = MESSAGES if prompt is None else [{"role": "user", "content": prompt}]
    return chat_body(model, messages=messages, tools=TOOLS, tool_choice=tool_choice, max_tokens=48, **extra)


@pytest.fixture
def tool_worker(worker: Worker, tools_supported: bool) -> Worker:
    if not tools_supported:
        pytest.skip("the worker was not declared able to call tools (--worker-tools)")
    return worker


@dataclass(frozen=True, slots=True)
class Trigger:
    """What makes the worker call the tool (--worker-tool-choice, --worker-tool-prompt)."""

    tool_choice: Any
    prompt: str | None

    def body(self, model: str, **extra: Any) -> dict[str, Any]:
        return _tool_body(model, self.tool_choice, self.prompt, **extra)

    def __str__(self) -> str:
        cue = "" if self.prompt is None else f" and the prompt {self.prompt!r}"
        return f"tool_choice {self.tool_choice!r}{cue}"


@pytest.fixture
def trigger(tool_choice_mode: str, tool_prompt: str | None) -> Trigger:
    choice = {"named": NAMED, "required": "required", "auto": "auto"}[tool_choice_mode]
    return Trigger(choice, tool_prompt)


def _finish_reasons(trigger: Trigger) -> tuple[str, ...]:
    # OpenAI and vLLM finish a call forced by name with "stop"; a chosen call with "tool_calls".
    return ("tool_calls", "stop") if isinstance(trigger.tool_choice, dict) else ("tool_calls",)


def _arguments_are_an_object(arguments: str, where: str) -> None:
    try:
        parsed = json.loads(arguments)
    except ValueError:
        parsed = None
    should("TOOL-4", isinstance(parsed, dict), f"{where}: expected a JSON object, saw {arguments!r}")


@pytest.mark.rules("TOOL-1")
@pytest.mark.parametrize(
    "tool_choice", ["none", "auto", "required", NAMED], ids=["none", "auto", "required", "named"]
)
def test_every_tool_choice_is_accepted(tool_worker: Worker, tool_choice: Any) -> None:
    reply = client.post(tool_worker, CHAT_PATH, _tool_body(tool_worker.model, tool_choice))
    rule("TOOL-1", reply.status == 200, f"tool_choice {tool_choice!r}: expected 200, saw {reply.brief()}")
    message = reply.json()["choices"][0]["message"]
    if tool_choice == "none":
        rule(
            "TOOL-1",
            not message.get("tool_calls"),
            f'tool_choice "none": expected no tool_calls, saw {message.get("tool_calls")!r}',
        )


@pytest.mark.rules("TOOL-2", "TOOL-4")
def test_a_tool_call_answer(tool_worker: Worker, trigger: Trigger) -> None:
    reply = client.post(tool_worker, CHAT_PATH, trigger.body(tool_worker.model))
    where = str(trigger)
    rule("TOOL-2", reply.status == 200, f"{where}: expected 200, saw {reply.brief()}")
    choice = reply.json()["choices"][0]
    message = choice["message"]
    calls = message.get("tool_calls")
    rule("TOOL-2", isinstance(calls, list) and calls, f"{where}: expected message.tool_calls, saw {message}")
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        ok = (
            isinstance(call.get("id"), str)
            and call["id"]
            and call.get("type") == "function"
            and isinstance(function, dict)
            and function.get("name") == TOOL_NAME
            and isinstance(function.get("arguments"), str)
        )
        rule(
            "TOOL-2",
            ok,
            f'{where}: expected {{"id": str, "type": "function", "function": {{"name": "{TOOL_NAME}", '
            f'"arguments": str}}}}, saw {call}',
        )
    rule(
        "TOOL-2",
        message.get("content") is None or isinstance(message["content"], str),
        f"{where}: expected content null or a string beside tool_calls, saw {message.get('content')!r}",
    )
    reasons = _finish_reasons(trigger)
    rule(
        "TOOL-2",
        choice.get("finish_reason") in reasons,
        f"{where}: expected finish_reason in {reasons}, saw {choice.get('finish_reason')!r}",
    )
    _arguments_are_an_object(calls[0]["function"]["arguments"], f"{where}: arguments")


def _streamed_calls(stream: Stream, where: str) -> dict[int, dict[str, Any]]:
    """Rebuild each call from its deltas, checking each delta's shape (TOOL-3)."""
    calls: dict[int, dict[str, Any]] = {}
    for chunk in stream.with_choices:
        delta = chunk["choices"][0].get("delta") or {}
        for item in delta.get("tool_calls") or []:
            index = item.get("index") if isinstance(item, dict) else None
            if not isinstance(index, int):
                violated("TOOL-3", f"{where}: expected an integer index on {item}")
            function = item.get("function") or {}
            fragment = function.get("arguments")
            rule(
                "TOOL-3",
                fragment is None or isinstance(fragment, str),
                f"{where}: expected arguments fragments to be strings, saw {item}",
            )
            if index not in calls:
                ok = (
                    isinstance(item.get("id"), str)
                    and item.get("type") == "function"
                    and function.get("name") == TOOL_NAME
                )
                rule(
                    "TOOL-3",
                    ok,
                    f"{where}: expected the first delta of call {index} to carry id, "
                    f'"type": "function" and the function name, saw {item}',
                )
                calls[index] = {"id": item["id"], "name": function["name"], "arguments": ""}
            else:
                rule(
                    "TOOL-3",
                    function.get("name") is None and item.get("id") in (None, calls[index]["id"]),
                    f"{where}: expected later deltas of call {index} to carry only arguments, saw {item}",
                )
            calls[index]["arguments"] += fragment or ""
    return calls


@pytest.mark.rules("TOOL-3", "TOOL-4")
def test_a_streamed_tool_call(tool_worker: Worker, trigger: Trigger) -> None:
    stream = client.stream_request(tool_worker, CHAT_PATH, trigger.body(tool_worker.model, stream=True))
    where = f"streamed with {trigger}"
    rule("TOOL-3", stream.reply.status == 200, f"{where}: expected 200, saw {stream.reply.brief()}")
    rule(
        "TOOL-3", stream.last_event == b"[DONE]", f"{where}: expected [DONE] last, saw {stream.last_event!r}"
    )
    calls = _streamed_calls(stream, where)
    rule(
        "TOOL-3",
        calls,
        f"{where}: expected delta.tool_calls, saw {[c['choices'] for c in stream.with_choices]}",
    )
    finishing = [c for c in stream.with_choices if c["choices"][0].get("finish_reason") is not None]
    reasons = _finish_reasons(trigger)
    seen = [c["choices"][0]["finish_reason"] for c in finishing]
    rule("TOOL-3", seen and seen[-1] in reasons, f"{where}: expected finish_reason in {reasons}, saw {seen}")
    rule("TOOL-3", calls[0]["arguments"], f"{where}: expected argument fragments, saw {calls}")
    _arguments_are_an_object(calls[0]["arguments"], f"{where}: concatenated arguments")


@pytest.mark.rules("TOOL-6")
def test_a_tool_result_turn_is_accepted(tool_worker: Worker) -> None:
    arguments = json.dumps({"city": "Paris"})
    messages = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_conformance_1",
                    "type": "function",
                    "function": {"name": TOOL_NAME, "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_conformance_1", "content": json.dumps({"celsius": 21})},
    ]
    body = chat_body(tool_worker.model, messages=messages, tools=TOOLS, max_tokens=16)
    reply = client.post(tool_worker, CHAT_PATH, body)
    rule(
        "TOOL-6", reply.status == 200, f"a conversation with a tool result: expected 200, saw {reply.brief()}"
    )
    choices = reply.json().get("choices")
    rule("TOOL-6", isinstance(choices, list) and choices, f"expected a chat.completion, saw {reply.brief()}")


@pytest.mark.rules("TOOL-7")
@pytest.mark.parametrize("tool_choice", ["required", NAMED], ids=["required", "named"])
def test_a_forced_tool_choice_is_enforced(tool_worker: Worker, tool_choice: Any) -> None:
    reply = client.post(tool_worker, CHAT_PATH, _tool_body(tool_worker.model, tool_choice))
    where = f"tool_choice {tool_choice!r} with the plain prompt {MESSAGES[0]['content']!r}"
    rule("TOOL-1", reply.status == 200, f"{where}: expected 200, saw {reply.brief()}")
    message = reply.json()["choices"][0]["message"]
    should("TOOL-7", message.get("tool_calls"), f"{where}: expected message.tool_calls, saw {message}")


@pytest.mark.rules("TOOL-5")
@pytest.mark.parametrize("tool_choice", ["required", NAMED], ids=["required", "named"])
def test_a_worker_without_tools_refuses_forced_calls(
    worker: Worker, tools_supported: bool, tool_choice: Any
) -> None:
    if tools_supported:
        pytest.skip("the worker calls tools (--worker-tools): TOOL-2 covers forced calls")
    reply = client.post(worker, CHAT_PATH, _tool_body(worker.model, tool_choice))
    where = f"tool_choice {tool_choice!r}"
    if reply.status == 400:
        error_envelope(reply, where)
        return
    calls = reply.json_or_none()
    message = calls["choices"][0]["message"] if reply.status == 200 and isinstance(calls, dict) else None
    rule(
        "TOOL-5",
        isinstance(message, dict) and message.get("tool_calls"),
        f"{where}: expected a 400, or a tool call, saw {reply.brief()}",
    )
