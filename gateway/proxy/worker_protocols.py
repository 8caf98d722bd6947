"""What the gateway reads from a worker's answer, per protocol the worker speaks.

Every worker speaks the OpenAI chat contract (CHAT); a model whose workers serve a client API
themselves (`protocols: {messages: native}`, `{responses: native}`) is answered in that API's own
events, read by MESSAGES and RESPONSES. Each reads the same four things, which is all the relay
and the settlement need: whether an event carried output (what keeps a stream alive and times its
tokens), the usage so far and the final usage, the finish reason, and the end or a failure. The
client's bytes are not decided here (gateway.apis, translated by gateway.proxy.translation).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.errors import ErrorCode, Failure, GatewayError
from gateway.proxy.settlement import Outcome
from gateway.proxy.usage import InvalidUsage, Usage, parse_usage
from gateway.proxy.worker_errors import failed_workers_words, sanitised
from gateway.routing.prefix import PromptFields


@dataclass(slots=True)
class Batch:
    out: bytes = b""
    done: bool = False  # the worker ended its stream, or failed with an error event
    output: bool = False  # an event carried output (text, a finish, usage, the end): the worker is alive
    failure: GatewayError | None = None
    usage: Usage | None = None  # the last cumulative usage report among the events
    stored_id: str | None = None  # a response the worker keeps, first named in this batch


class StreamReader(Protocol):
    """One stream's events, read in order; state lives here, one reader a stream."""

    def read(self, chunk: dict[str, Any], outcome: Outcome, batch: Batch) -> None: ...


class WorkerProtocol(Protocol):
    @property
    def prompt(self) -> PromptFields:
        """The request body's fields the engine renders into the prompt (prefix routing hashes them)."""
        ...

    def reader(self) -> StreamReader: ...

    def usage(self, answer: dict[str, Any]) -> Usage:
        """A whole answer's usage, checked (raises InvalidUsage)."""
        ...

    def stored_id(self, answer: dict[str, Any]) -> str | None:
        """The id of a response the worker keeps, for later calls that must reach it."""
        ...

    def finish_reason(self, answer: dict[str, Any]) -> str | None:
        """A whole answer's finish reason (a stream's is read in passing)."""
        ...


def _generated(outcome: Outcome) -> None:
    now = time.perf_counter()
    if outcome.first_token_at is None:
        outcome.first_token_at = now
    outcome.last_token_at = now
    outcome.tokens_relayed += 1


def at_least_relayed(usage: Usage, outcome: Outcome) -> Usage:
    """A native stream's final usage, never below the output events the client received (each is
    at least one token): a worker that reports 0 while text arrives is billed what was relayed,
    and its report counts as invalid."""
    if usage.completion_tokens >= outcome.tokens_relayed:
        return usage
    outcome.invalid_usage = True
    return Usage(usage.prompt_tokens, outcome.tokens_relayed)


def failure_event(error: Any) -> GatewayError:
    """A worker's own error event, re-told in the gateway's terms: it ends the stream."""
    message = error.get("message") if isinstance(error, dict) else error
    if isinstance(message, str) and message.strip():
        # Its words may name where it runs, as a failing worker's answer may (worker_errors).
        return GatewayError(
            ErrorCode.UPSTREAM_ERROR,
            sanitised("The worker failed mid-stream: " + failed_workers_words(message)),
        )
    return GatewayError(ErrorCode.UPSTREAM_ERROR, "The worker failed mid-stream.")


# -- the OpenAI chat contract ------------------------------------------------------------------


class ChatReader:
    """Chunks of `chat.completion.chunk` / `text_completion`, ended by `data: [DONE]` (handled
    by the relay, the same for every protocol)."""

    __slots__ = ()

    def read(self, chunk: dict[str, Any], outcome: Outcome, batch: Batch) -> None:
        if "error" in chunk:
            outcome.error_reason = Failure.WORKER_ERROR_EVENT
            batch.failure = failure_event(chunk["error"])
            batch.done = batch.output = True
            return
        choices = chunk.get("choices")
        if isinstance(choices, list):
            # Generated text and finish reasons (what keeps a stream alive), read inline: this
            # runs for every chunk of every chat stream.
            generated = False
            for choice in choices:
                if not isinstance(choice, dict):
                    continue
                delta = choice.get("delta")
                if isinstance(delta, dict):
                    if delta.get("content") or delta.get("tool_calls") or delta.get("reasoning_content"):
                        generated = True
                elif choice.get("text"):
                    generated = True
                reason = choice.get("finish_reason")
                if isinstance(reason, str) and reason:
                    outcome.finish_reason = reason
                    batch.output = True
            if generated:
                batch.output = True
                # `_generated`, inline (the other protocols call it: their events are fewer).
                now = time.perf_counter()
                if outcome.first_token_at is None:
                    outcome.first_token_at = now
                outcome.last_token_at = now
                outcome.tokens_relayed += 1
        if "usage" in chunk and chunk["usage"] is not None:
            if choices == []:
                batch.output = True  # the final report (a per-chunk one rides on a delta)
            # Checked for every chunk that carries usage (each one, with continuous usage).
            try:
                usage = parse_usage(chunk["usage"])
            except InvalidUsage:
                outcome.invalid_usage = True  # a lie is marked and otherwise ignored
            else:
                batch.usage = usage
                if choices == []:
                    outcome.usage = usage  # the final report


_CHAT_READER = ChatReader()


class ChatContract:
    prompt = PromptFields(("tools",), ("messages", "prompt"))  # chat, and completions' prompt

    def reader(self) -> StreamReader:
        return _CHAT_READER  # stateless

    def usage(self, answer: dict[str, Any]) -> Usage:
        return parse_usage(answer.get("usage"))

    def stored_id(self, answer: dict[str, Any]) -> str | None:
        return None

    def finish_reason(self, answer: dict[str, Any]) -> str | None:
        """The first choice's."""
        choices = answer.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        return _word(first.get("finish_reason")) if isinstance(first, dict) else None


def _word(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# -- Anthropic Messages, served natively ---------------------------------------------------------


def _anthropic_usage(report: Any, prompt: int | None = None) -> Usage:
    """`{"input_tokens", "output_tokens"}` as checked counts; `prompt` stands in for an
    input count the report leaves out (message_delta's usually does)."""
    if not isinstance(report, dict):
        raise InvalidUsage("usage is not an object")
    return parse_usage(
        {
            "prompt_tokens": report.get("input_tokens", prompt),
            "completion_tokens": report.get("output_tokens"),
        }
    )


# Each Messages output delta, and the field that carries its output: a delta whose field is
# empty carries nothing, so it neither counts nor keeps a stream alive.
_MESSAGES_OUTPUT = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json"}


class MessagesReader:
    """message_start (input usage) -> content blocks -> message_delta (stop reason, output usage)
    -> message_stop. Mid-stream the usage known is the exact input count and the deltas relayed
    (vLLM sends one a token): what a client that leaves is metered with."""

    __slots__ = ("_prompt",)

    def __init__(self) -> None:
        self._prompt: int | None = None

    def read(self, chunk: dict[str, Any], outcome: Outcome, batch: Batch) -> None:
        kind = chunk.get("type")
        if kind == "content_block_delta":
            delta = chunk.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            field = _MESSAGES_OUTPUT.get(str(delta.get("type")))
            if field is not None and delta.get(field):
                _generated(outcome)
                batch.output = True
                if outcome.usage is not None:
                    # Output after the final report (message_delta is not the end): it counts too.
                    outcome.usage = batch.usage = at_least_relayed(outcome.usage, outcome)
                elif self._prompt is not None:
                    batch.usage = Usage(self._prompt, outcome.tokens_relayed)
        elif kind == "message_start":
            message = chunk.get("message")
            report = message.get("usage") if isinstance(message, dict) else None
            try:
                self._prompt = _anthropic_usage(report, 0).prompt_tokens
            except InvalidUsage:
                outcome.invalid_usage = True
        elif kind == "message_delta":
            delta = chunk.get("delta")
            reason = delta.get("stop_reason") if isinstance(delta, dict) else None
            if isinstance(reason, str) and reason:
                # The finish (an empty message_delta repeated would keep nothing alive).
                outcome.finish_reason = reason
                batch.output = True
            try:
                usage = _anthropic_usage(chunk.get("usage"), self._prompt)
            except InvalidUsage:
                outcome.invalid_usage = True
            else:
                outcome.usage = batch.usage = at_least_relayed(usage, outcome)
        elif kind == "message_stop":
            batch.done = batch.output = True
        elif kind == "error":
            outcome.error_reason = Failure.WORKER_ERROR_EVENT
            batch.failure = failure_event(chunk.get("error"))
            batch.done = batch.output = True


class NativeMessages:
    prompt = PromptFields(("tools", "system"), ("messages",))

    def reader(self) -> StreamReader:
        return MessagesReader()

    def usage(self, answer: dict[str, Any]) -> Usage:
        return _anthropic_usage(answer.get("usage"))

    def stored_id(self, answer: dict[str, Any]) -> str | None:
        return None

    def finish_reason(self, answer: dict[str, Any]) -> str | None:
        return _word(answer.get("stop_reason"))


# -- OpenAI Responses, served natively -----------------------------------------------------------

_RESPONSES_OUTPUT = frozenset(
    {
        "response.output_text.delta",
        "response.function_call_arguments.delta",
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
        "response.refusal.delta",
    }
)
_RESPONSES_END = frozenset({"response.completed", "response.incomplete"})


def responses_id(response: Any) -> str | None:
    rid = response.get("id") if isinstance(response, dict) else None
    return rid if isinstance(rid, str) and rid else None


class ResponsesReader:
    """response.created (the id) -> deltas -> response.completed / .incomplete (usage), or
    response.failed / error. Usage comes only at the end: a client that leaves mid-stream is
    metered with the prompt estimate and the deltas relayed. The id is taken from the first
    event that names one (response.created, or the end for a worker that skips it)."""

    __slots__ = ("_named",)

    def __init__(self) -> None:
        self._named = False

    def read(self, chunk: dict[str, Any], outcome: Outcome, batch: Batch) -> None:
        kind = chunk.get("type")
        if kind in _RESPONSES_OUTPUT:
            if chunk.get("delta"):  # an empty delta is not output: it keeps nothing alive
                _generated(outcome)
                batch.output = True
            return
        response = chunk.get("response")
        if not self._named and isinstance(response, dict):
            batch.stored_id = responses_id(response)
            self._named = batch.stored_id is not None
        if kind in _RESPONSES_END:
            response = response if isinstance(response, dict) else {}
            details = response.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            outcome.finish_reason = reason if isinstance(reason, str) else "stop"
            batch.done = batch.output = True
            try:
                usage = _responses_usage(response.get("usage"))
            except InvalidUsage:
                outcome.invalid_usage = True
            else:
                outcome.usage = batch.usage = at_least_relayed(usage, outcome)
        elif kind in ("response.failed", "error"):
            outcome.error_reason = Failure.WORKER_ERROR_EVENT
            error = response.get("error") if isinstance(response, dict) else chunk
            batch.failure = failure_event(error)
            batch.done = batch.output = True


def _responses_usage(report: Any) -> Usage:
    if not isinstance(report, dict):
        raise InvalidUsage("usage is not an object")
    return parse_usage(
        {"prompt_tokens": report.get("input_tokens"), "completion_tokens": report.get("output_tokens")}
    )


class NativeResponses:
    prompt = PromptFields(("tools", "instructions"), ("input",))

    def reader(self) -> StreamReader:
        return ResponsesReader()

    def usage(self, answer: dict[str, Any]) -> Usage:
        return _responses_usage(answer.get("usage"))

    def stored_id(self, answer: dict[str, Any]) -> str | None:
        return responses_id(answer)

    def finish_reason(self, answer: dict[str, Any]) -> str | None:
        """As its stream's end tells it (ResponsesReader): why it is incomplete, or `stop`."""
        details = answer.get("incomplete_details")
        if isinstance(details, dict):
            return _word(details.get("reason"))
        return "stop" if answer.get("status") == "completed" else None


CHAT = ChatContract()
MESSAGES = NativeMessages()
RESPONSES = NativeResponses()
