"""One generation from slot to answer: the loop over the engine's pieces, and how it is framed.

The SSE frames are the fake worker's (`workers.fake.framing`), which are byte-for-byte vLLM's.
A stream sends the role chunk with the first text the engine hands over (as vLLM does with its
first output), content as it is released, then the remaining content with the finish_reason, or
the tool calls (first delta per call: index, id, type, name, `arguments: ""`; then argument
fragments, the last carrying finish_reason "tool_calls"), the usage chunk when asked, `[DONE]`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from prometheus_client import Histogram
from starlette.types import Send

from workers.fake import framing
from workers.fake.framing import ChatFrames, CompletionFrames
from workers.reframr.engine import Engine, Tokenizer, count_tokens
from workers.reframr.output import OutputShaper, Shaped, split_words
from workers.reframr.request import Order
from workers.reframr.scheduler import EngineRunner, Ticket


@dataclass(frozen=True, slots=True)
class Answer:
    shaped: Shaped
    finish_reason: str
    completion_tokens: int


def _no_finish(delta: dict[str, Any]) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}


class SSESink:
    """Frames one stream's events and sends them as HTTP body chunks."""

    def __init__(self, send: Send, frames: ChatFrames | CompletionFrames) -> None:
        self._send = send
        self.frames = frames
        self.begun = False

    async def emit(self, data: bytes) -> None:
        await self._send({"type": "http.response.body", "body": data, "more_body": True})

    async def begin(self) -> None:
        self.begun = True
        if isinstance(self.frames, ChatFrames):
            await self.emit(self.frames.role())

    async def content(self, text: str) -> None:
        for part in split_words(text):
            await self.emit(self.frames.token(part))

    async def finish(self, answer: Answer, prompt_tokens: int, include_usage: bool) -> None:
        if not self.begun:
            await self.begin()
        calls = answer.shaped.tool_calls
        parts = split_words(answer.shaped.tail)
        if calls and isinstance(self.frames, ChatFrames):
            await self.content(answer.shaped.tail)
            for index, call in enumerate(calls):
                head = {"id": call.id, "type": "function", "index": index}
                start = {**head, "function": {"name": call.name, "arguments": ""}}
                await self.emit(self.frames.chunk(_no_finish({"tool_calls": [start]})))
                fragments = split_words(call.arguments)
                for j, fragment in enumerate(fragments):
                    delta = {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}
                    if index == len(calls) - 1 and j == len(fragments) - 1:
                        await self.emit(self.frames.finish(delta, answer.finish_reason))
                    else:
                        await self.emit(self.frames.chunk(_no_finish(delta)))
        else:
            for part in parts[:-1]:
                await self.emit(self.frames.token(part))
            await self.emit(self.frames.last_token(parts[-1] if parts else "", answer.finish_reason))
        if include_usage:
            await self.emit(self.frames.usage_chunk(prompt_tokens, answer.completion_tokens))
        await self.emit(framing.SSE_DONE)


async def produce(
    runner: EngineRunner,
    engine: Engine,
    order: Order,
    ticket: Ticket,
    *,
    admitted: float,
    ttft: Histogram,
    sink: SSESink | None,
) -> Answer:
    """Wait for the slot, run the engine, shape its text; stop the engine as soon as the answer is
    complete (stop sequence, max_tokens) or this coroutine is cancelled (the client left)."""
    await runner.slot.wait(ticket)
    gen = runner.start(engine, order.job, ticket)
    shaper = OutputShaper(order.stops, order.tools)
    pieces: list[str] = []
    finish_reason = "stop"
    try:
        while (piece := await gen.next_piece()) is not None:
            if not pieces:
                ttft.observe(time.perf_counter() - admitted)
                if sink is not None:
                    await sink.begin()
            pieces.append(piece)
            released = shaper.feed(piece)
            if released and sink is not None:
                await sink.content(released)
            if shaper.stopped:
                break
            if gen.token_mode and len(pieces) >= order.job.max_tokens:
                finish_reason = "length"
                break
    finally:
        gen.stop()
    generated = "".join(pieces)
    if isinstance(engine, Tokenizer):
        completion_tokens = engine.count_tokens(generated)
    else:
        # One piece is one token for a token engine; a buffered one gets the whitespace estimate,
        # which cannot be right above the cap the engine was given.
        estimate = min(count_tokens(engine, generated), order.job.max_tokens)
        completion_tokens = len(pieces) if gen.token_mode else estimate
    if not gen.token_mode and completion_tokens >= order.job.max_tokens:
        finish_reason = "length"
    shaped = shaper.finish()
    if shaper.stopped:
        finish_reason = "stop"
    if shaped.tool_calls:
        finish_reason = "tool_calls"
    return Answer(shaped, finish_reason, completion_tokens)


def answer_body(order: Order, response_id: str, created: int, answer: Answer, prompt_tokens: int) -> bytes:
    shaped = answer.shaped
    if not order.chat:
        return framing.text_completion(
            response_id,
            created,
            order.model,
            shaped.content,
            answer.finish_reason,
            prompt_tokens,
            answer.completion_tokens,
        )
    message: dict[str, Any] = {"role": "assistant", "content": shaped.content, "tool_calls": []}
    if shaped.tool_calls:
        message["content"] = shaped.content.strip() or None
        message["tool_calls"] = [call.to_json() for call in shaped.tool_calls]
    return framing.chat_completion(
        response_id,
        created,
        order.model,
        message,
        answer.finish_reason,
        prompt_tokens,
        answer.completion_tokens,
    )
