"""How one generation unfolds for a `Plan`: the non-stream answer body and the stream's events."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Protocol

from starlette.types import Send

from workers.common import framing
from workers.common.framing import ChatFrames, CompletionFrames
from workers.fake.aborts import InjectedAbort
from workers.fake.plan import STALL_S, TOOL_ARGUMENT_FRAGMENTS, Plan
from workers.fake.records import RequestRecord

Frames = ChatFrames | CompletionFrames


def token_text(i: int) -> str:
    return f"tok{i} "


def reasoning_split(plan: Plan, i: int) -> tuple[str, str]:
    """Token i as (reasoning_content, content): with `tags`, the reasoning tokens are content,
    `<think>` opening the first and `</think>` closing the last."""
    text = token_text(i)
    if i >= plan.reasoning:
        return "", text
    if plan.reasoning_as == "field":
        return text, ""
    opening = "<think>" if i == 0 else ""
    closing = "</think>" if i == plan.reasoning - 1 else ""
    return "", opening + text + closing


def _tool_call_id() -> str:
    return f"chatcmpl-tool-{uuid.uuid4().hex}"


def answer_body(
    plan: Plan, *, chat: bool, response_id: str, created: int, model: str, prompt_tokens: int
) -> bytes:
    """The whole non-stream answer of a generation that succeeded."""
    tokens = plan.tokens
    text = "".join(token_text(i) for i in range(tokens))
    if not chat:
        return framing.text_completion(
            response_id, created, model, text, plan.finish_reason, prompt_tokens, tokens
        )
    message: dict[str, Any] = {"role": "assistant", "content": text, "tool_calls": []}
    if plan.reasoning:
        parts = [reasoning_split(plan, i) for i in range(tokens)]
        message["content"] = "".join(content for _, content in parts)
        if plan.reasoning_as == "field":
            message["reasoning_content"] = "".join(reasoning for reasoning, _ in parts)
    if plan.tool_call is not None:
        arguments = "".join(TOOL_ARGUMENT_FRAGMENTS)
        function = {"name": plan.tool_call, "arguments": arguments}
        message["content"] = None
        message["tool_calls"] = [{"id": _tool_call_id(), "type": "function", "function": function}]
    return framing.chat_completion(
        response_id, created, model, message, plan.finish_reason, prompt_tokens, tokens
    )


def _token_chunk(frames: Frames, plan: Plan, i: int, finish_reason: str | None) -> bytes:
    # Token i is the chunk's only token, so i + 1 have been generated once it is out.
    if plan.tool_call is not None and isinstance(frames, ChatFrames):
        return frames.tool_call_arguments(TOOL_ARGUMENT_FRAGMENTS[i], finish_reason, generated=i + 1)
    if i < plan.reasoning and isinstance(frames, ChatFrames):
        reasoning, content = reasoning_split(plan, i)
        delta = {"reasoning_content": reasoning} if reasoning else {"content": content}
        if finish_reason is not None:
            return frames.finish(delta, finish_reason, generated=i + 1)
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        return frames.chunk(choice, generated=i + 1)
    if finish_reason is not None:
        return frames.last_token(token_text(i), finish_reason, generated=i + 1)
    return frames.token(token_text(i), generated=i + 1)


async def _hold_if(plan: Plan, sent: int) -> None:
    """`x-fake-hold-after`: nothing more until the client leaves (run_unless_disconnected cancels
    this when it does), or STALL_S."""
    if plan.holds_at(sent):
        await asyncio.sleep(STALL_S)


async def produce_stream(
    record: RequestRecord,
    plan: Plan,
    frames: Frames,
    prompt_tokens: int,
    include_usage: bool,
    send: Send,
) -> None:
    """Send every event of the stream after the response headers, ending with `[DONE]`.

    Raises InjectedAbort where `x-fake-fail-after` wants the connection dropped.
    """

    async def emit(data: bytes) -> None:
        await send({"type": "http.response.body", "body": data, "more_body": True})

    if plan.first_token_delay_s:
        await asyncio.sleep(plan.first_token_delay_s)
    if isinstance(frames, ChatFrames):
        await emit(frames.role())
        if plan.tool_call is not None:
            await emit(frames.tool_call_start(_tool_call_id(), plan.tool_call, generated=0))
    tokens = plan.tokens_to_send
    failing = plan.failure_at is not None
    for i in range(tokens):
        await _hold_if(plan, i)
        if plan.token_delay_s:
            await asyncio.sleep(plan.token_delay_s)
        # A failing stream never announces a finish: the failure comes instead.
        last = not failing and i == tokens - 1
        await emit(_token_chunk(frames, plan, i, plan.finish_reason if last else None))
        record.tokens_sent += 1
    await _hold_if(plan, tokens)
    if plan.fail_after is not None:
        raise InjectedAbort(f"fake worker: injected abort after {tokens} tokens")
    if failing:
        message = f"fake worker: injected error after {tokens} tokens"
        await emit(framing.sse_error(message, "InternalServerError", 500))
        record.finish("failed")
    else:
        if tokens == 0:
            await emit(frames.last_token("", plan.finish_reason, generated=0))
        if include_usage:
            await emit(frames.usage_chunk(prompt_tokens, tokens))
        record.finish("completed")
    await emit(framing.SSE_DONE)


class NativeEvents(Protocol):
    """The events of a stream in a native dialect (Anthropic Messages, OpenAI Responses)."""

    def opening(self) -> list[bytes]:
        """Sent once the first-token delay has passed, before any token."""

    def token(self, i: int) -> bytes:
        """Token i's event (its text is `token_text(i)`)."""

    def closing(self) -> list[bytes]:
        """Sent after the last token of a generation that succeeded; the body ends after them."""

    def failure(self, message: str) -> bytes:
        """The dialect's error event, for `x-fake-error-event-after`; the body ends after it."""


async def produce_native_stream(record: RequestRecord, plan: Plan, events: NativeEvents, send: Send) -> None:
    """Send every event of a native-dialect stream after the response headers.

    Raises InjectedAbort where `x-fake-fail-after` wants the connection dropped.
    """

    async def emit(data: bytes) -> None:
        await send({"type": "http.response.body", "body": data, "more_body": True})

    if plan.first_token_delay_s:
        await asyncio.sleep(plan.first_token_delay_s)
    for event in events.opening():
        await emit(event)
    tokens = plan.tokens_to_send
    for i in range(tokens):
        await _hold_if(plan, i)
        if plan.token_delay_s:
            await asyncio.sleep(plan.token_delay_s)
        await emit(events.token(i))
        record.tokens_sent += 1
    await _hold_if(plan, tokens)
    if plan.fail_after is not None:
        raise InjectedAbort(f"fake worker: injected abort after {tokens} tokens")
    if plan.failure_at is not None:
        await emit(events.failure(f"fake worker: injected error after {tokens} tokens"))
        record.finish("failed")
        return
    for event in events.closing():
        await emit(event)
    record.finish("completed")
