"""A worker's whole chat answer as a Gemini `GenerateContentResponse`, and the pieces a stream
shares with it (finish reasons, function-call parts, usageMetadata).

    choices[i].message.reasoning_content -> {"text": ..., "thought": true}   (unless includeThoughts
                                            is false)
                      .content           -> {"text": ...}
                      .tool_calls[k]     -> {"functionCall": {"id", "name", "args": {object}}}
    choices[i].finish_reason stop | tool_calls -> STOP, length -> MAX_TOKENS,
                             content_filter -> SAFETY, anything else -> OTHER
    usage -> usageMetadata: promptTokenCount, candidatesTokenCount (the answer less its reasoning),
             thoughtsTokenCount (the worker's completion_tokens_details.reasoning_tokens, when it
             reports them), totalTokenCount

The counts the client is told are the worker's report, the ones the request is metered with (the
completion tokens are candidates + thoughts); where that report cannot be trusted, the gateway's
estimates, the ones it meters then.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from gateway.proxy.usage import InvalidUsage, parse_usage

_FINISH = {"stop": "STOP", "tool_calls": "STOP", "function_call": "STOP", "length": "MAX_TOKENS"}
_FINISH_OTHER = {"content_filter": "SAFETY"}


def finish_reason(reason: str | None) -> str:
    if reason is None:
        return "STOP"
    return _FINISH.get(reason) or _FINISH_OTHER.get(reason, "OTHER")


def function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A functionCall part; arguments that are no JSON object (a model's mistake) become an empty
    object rather than a failed answer: Gemini's `args` must be one."""
    try:
        args = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        args = {}
    call = {"name": name, "args": args if isinstance(args, dict) else {}}
    if call_id:
        call["id"] = call_id
    return {"functionCall": call}


def reasoning_tokens(usage: Any, completion: int) -> int:
    """The part of `completion` the worker says was reasoning (0 when it does not say)."""
    details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
    count = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return count if type(count) is int and 0 <= count <= completion else 0


def usage_metadata(prompt: int, completion: int, thoughts: int = 0) -> dict[str, int]:
    metadata = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": completion - thoughts,
        "totalTokenCount": prompt + completion,
    }
    if thoughts:
        metadata["thoughtsTokenCount"] = thoughts
    return metadata


def message_parts(message: dict[str, Any], include_thoughts: bool) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    reasoning = _str(message.get("reasoning_content")) or _str(message.get("reasoning"))
    if reasoning and include_thoughts:
        parts.append({"text": reasoning, "thought": True})
    text = _str(message.get("content"))
    if text:
        parts.append({"text": text})
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts.append(
                function_call(
                    _str(call.get("id")) or "",
                    _str(function.get("name")) or "",
                    _str(function.get("arguments")) or "",
                )
            )
    return parts


def whole(
    answer: dict[str, Any],
    *,
    response_id: str,
    model_version: str,
    include_thoughts: bool,
    estimates: tuple[int, int],
) -> bytes:
    """`estimates`: (prompt, completion) the request is metered with if the usage is no good."""
    candidates = []
    choices = answer.get("choices")
    for i, choice in enumerate(choices if isinstance(choices, list) else ()):
        if not isinstance(choice, dict):
            continue
        message = choice.get("message")
        parts = message_parts(message if isinstance(message, dict) else {}, include_thoughts)
        index = choice.get("index")
        candidates.append(
            {
                # One part even for an answer of nothing: clients index parts[0].
                "content": {"role": "model", "parts": parts or [{"text": ""}]},
                "finishReason": finish_reason(_str(choice.get("finish_reason"))),
                "index": index if type(index) is int else i,
            }
        )
    report = answer.get("usage")
    try:
        usage = parse_usage(report)
        metadata = usage_metadata(
            usage.prompt_tokens,
            usage.completion_tokens,
            reasoning_tokens(report, usage.completion_tokens),
        )
    except InvalidUsage:
        metadata = usage_metadata(*estimates)
    return orjson.dumps(
        {
            "candidates": candidates,
            "usageMetadata": metadata,
            "modelVersion": model_version,
            "responseId": response_id,
        }
    )


def estimated_completion_tokens(answer: dict[str, Any]) -> int:
    """~4 characters a token over everything the answer says (text, reasoning, call arguments)."""
    chars = 0
    choices = answer.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        message = choice.get("message") if isinstance(choice, dict) else None
        for part in message_parts(message if isinstance(message, dict) else {}, True):
            call = part.get("functionCall")
            chars += len(orjson.dumps(call["args"])) if call is not None else len(part.get("text", ""))
    return math.ceil(chars / 4)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
