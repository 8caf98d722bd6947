"""The rules of workers/CONTRACT.md, by id, and the helpers that report a broken one.

Every check in the suite goes through `rule()` (a MUST) or `should()` (a SHOULD), so every failure
message starts with the rule id and says what was expected and what the worker did:

    [SSE-3] MUST: the stream ends with `data: [DONE]`: expected the last event to be [DONE], saw ...

A rule the run declares as a known deviation (`--worker-allow ID`) is reported as xfail instead of a
failure; a SHOULD that is not met is an xfail unless the run is `--worker-strict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NoReturn

import pytest

Level = Literal["MUST", "SHOULD"]


@dataclass(frozen=True, slots=True)
class Rule:
    level: Level
    summary: str
    checked: bool
    """True when the suite checks it automatically (CONTRACT.md says why the others are not)."""


RULES: dict[str, Rule] = {
    # Endpoints
    "EP-1": Rule("MUST", "GET /v1/models lists every served model name", True),
    "EP-2": Rule("MUST", "POST /v1/chat/completions answers a chat.completion", True),
    "EP-3": Rule("MUST", "POST /v1/completions answers a text_completion", True),
    "EP-4": Rule("MUST", "GET /health is 200 only while the worker can serve", True),
    "EP-5": Rule("MUST", "GET /health answers within 1 s while generations run", True),
    "EP-6": Rule("MUST", "the OpenAI Python SDK parses every answer", True),
    "EP-7": Rule("SHOULD", "each /v1/models entry reports max_model_len", True),
    # Requests
    "REQ-1": Rule("MUST", "`model` in every answer is the requested name", True),
    "REQ-2": Rule("MUST", "max_tokens / max_completion_tokens cap the completion", True),
    "REQ-3": Rule("MUST", "`stop` ends the generation before the stop string", True),
    "REQ-4": Rule("MUST", "unknown request fields are ignored, not rejected", True),
    "REQ-5": Rule("SHOULD", "the response echoes the request's x-request-id", True),
    # Streaming
    "SSE-1": Rule("MUST", "a stream is 200 text/event-stream without content-length", True),
    "SSE-2": Rule("MUST", "the body is only `data: <json>\\n\\n` events", True),
    "SSE-3": Rule("MUST", "the stream ends with exactly one `data: [DONE]`", True),
    "SSE-4": Rule("MUST", "every chunk has the same id, created, model and the right object", True),
    "SSE-5": Rule("MUST", "the first chat chunk carries role assistant, no later one does", True),
    "SSE-6": Rule("MUST", "exactly one chunk carries finish_reason, the last with choices", True),
    "SSE-7": Rule("MUST", "include_usage adds one usage chunk with choices [] before [DONE]", True),
    "SSE-8": Rule("MUST", "without include_usage no chunk carries usage", True),
    "SSE-9": Rule("SHOULD", "text is streamed as it is generated, or the worker says it is not", False),
    "SSE-10": Rule("SHOULD", "continuous_usage_stats puts the running usage on every chunk", True),
    # Usage
    "USE-1": Rule("MUST", "every non-stream answer has a complete usage object", True),
    "USE-2": Rule("MUST", "tokens are the engine's tokenizer's, prompt after the chat template", False),
    "USE-3": Rule("MUST", "the same request reports the same prompt_tokens, stream or not", True),
    "USE-4": Rule("MUST", "a worker without the engine's tokenizer declares its counts estimated", False),
    # Errors
    "ERR-1": Rule("MUST", "every error answer is JSON in the OpenAI error envelope", True),
    "ERR-2": Rule("MUST", "a body that is not valid JSON is a 400", True),
    "ERR-3": Rule("MUST", "a request with invalid fields is a 400", True),
    "ERR-4": Rule("MUST", "an unknown model is a 404", True),
    "ERR-5": Rule("MUST", "a request beyond the context window is a 400", True),
    "ERR-6": Rule("MUST", "a full worker answers 429/503 with Retry-After", True),
    "ERR-7": Rule("MUST", "errors known before the first byte are HTTP errors, even for streams", True),
    "ERR-8": Rule("MUST", "a mid-stream failure is one error event, then [DONE]", False),
    # Tool calls
    "TOOL-1": Rule("MUST", "tools and every tool_choice form are accepted", True),
    "TOOL-2": Rule("MUST", "a tool call answers message.tool_calls with the right finish_reason", True),
    "TOOL-3": Rule("MUST", "a streamed tool call arrives as delta.tool_calls the way vLLM sends it", True),
    "TOOL-4": Rule("SHOULD", "tool call arguments are a JSON object", True),
    "TOOL-5": Rule("MUST", "a worker that cannot call tools rejects required/named tool_choice", True),
    "TOOL-6": Rule("MUST", "assistant tool_calls and tool result messages are accepted", True),
    "TOOL-7": Rule("SHOULD", "a forced tool_choice yields a tool call without a cue in the prompt", True),
    # Metrics
    "MET-1": Rule("MUST", "GET /metrics is Prometheus text", True),
    "MET-2": Rule("MUST", "gauge vllm:num_requests_running counts generating requests", True),
    "MET-3": Rule("MUST", "gauge vllm:num_requests_waiting counts queued requests", True),
    "MET-4": Rule("MUST", "vllm:kv_cache_usage_perc, where exported, is a gauge in [0, 1]", True),
    "MET-5": Rule("MUST", "the load gauges carry model_name=<served name>", True),
    # Disconnects
    "DIS-1": Rule("MUST", "a stream whose client leaves stops generating promptly", True),
    "DIS-2": Rule("MUST", "a non-stream request whose client leaves stops generating promptly", True),
    "DIS-3": Rule("SHOULD", "a queued request whose client leaves is dropped from the queue", False),
    # Anthropic Messages (optional: --worker-messages)
    "MSG-1": Rule("MUST", "POST /v1/messages answers a message with its usage", True),
    "MSG-2": Rule("MUST", "a Messages stream is named events from message_start to message_stop", True),
    "MSG-3": Rule("MUST", "a Messages stream carries usage in message_start and message_delta", True),
    "MSG-4": Rule("MUST", "Messages errors are HTTP errors with a JSON error body", True),
    "MSG-5": Rule("SHOULD", "POST /v1/messages/count_tokens counts the input as the answer does", True),
    "MSG-6": Rule("MUST", "a Messages failure mid-stream is one error event, then the end", False),
    # OpenAI Responses (optional: --worker-responses, --worker-responses-store)
    "RSP-1": Rule("MUST", "POST /v1/responses answers a response object with its usage", True),
    "RSP-2": Rule("MUST", "a Responses stream is numbered named events ending with the terminal one", True),
    "RSP-3": Rule("MUST", "a Responses stream names its id first and its usage last", True),
    "RSP-4": Rule("MUST", "Responses errors are HTTP errors in the OpenAI error envelope", True),
    "RSP-5": Rule("MUST", "a stored response is answered again by GET /v1/responses/{id}", True),
    "RSP-6": Rule("MUST", "previous_response_id continues a stored response", True),
    "RSP-7": Rule("MUST", "an unknown or unstored response id is a 404", True),
    "RSP-8": Rule("MUST", "cancelling a finished response is refused with 400, or answers it", True),
    "RSP-9": Rule("SHOULD", "DELETE /v1/responses/{id} deletes a stored response", True),
    "RSP-10": Rule("SHOULD", "GET /v1/responses/{id}/input_items lists its input items", True),
    "RSP-11": Rule("MUST", "a Responses failure mid-stream is one error event, then the end", False),
    # Tokenize (optional: --worker-tokenize)
    "TOK-1": Rule("MUST", "POST /tokenize counts messages as chat counts its prompt", True),
    "TOK-2": Rule("MUST", "POST /tokenize counts a prompt as completions counts it", True),
    "TOK-3": Rule("MUST", "/tokenize errors are HTTP errors in the OpenAI error envelope", True),
}


class _Settings:
    allowed: frozenset[str] = frozenset()
    strict: bool = False


settings = _Settings()


def configure(allowed: frozenset[str], strict: bool) -> None:
    unknown = sorted(allowed - RULES.keys())
    if unknown:
        raise pytest.UsageError(f"--worker-allow names unknown rule ids: {', '.join(unknown)}")
    settings.allowed = allowed
    settings.strict = strict


def _message(rule_id: str, detail: str) -> str:
    known = RULES[rule_id]
    return f"[{rule_id}] {known.level}: {known.summary}: {detail}"


def violated(rule_id: str, detail: str) -> NoReturn:
    """Report `rule_id` as broken: a failure, or an xfail for an allowed rule or a lax SHOULD."""
    __tracebackhide__ = True
    message = _message(rule_id, detail)
    if rule_id in settings.allowed:
        pytest.xfail(f"known deviation (--worker-allow) {message}")
    if RULES[rule_id].level == "SHOULD" and not settings.strict:
        pytest.xfail(f"SHOULD not met {message}")
    raise AssertionError(message)


def rule(rule_id: str, condition: object, detail: str) -> None:
    """Check a MUST rule; `detail` says what was expected and what was seen."""
    __tracebackhide__ = True
    assert RULES[rule_id].level == "MUST", rule_id
    if not condition:
        violated(rule_id, detail)


def should(rule_id: str, condition: object, detail: str) -> None:
    """Check a SHOULD rule (an xfail when not met, a failure under --worker-strict)."""
    __tracebackhide__ = True
    assert RULES[rule_id].level == "SHOULD", rule_id
    if not condition:
        violated(rule_id, detail)


def inconclusive(rule_id: str, why: str) -> NoReturn:
    """This run cannot decide `rule_id` (e.g. the worker is too fast to catch mid-generation)."""
    __tracebackhide__ = True
    pytest.skip(f"[{rule_id}] not decided against this worker: {why}")
