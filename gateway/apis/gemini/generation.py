"""Gemini's `generationConfig` as chat fields.

    maxOutputTokens -> max_tokens          temperature, topP, topK, seed, presencePenalty,
    stopSequences -> stop                  frequencyPenalty -> their chat names
    candidateCount -> n                    responseMimeType application/json (+ responseSchema |
    thinkingConfig -> chat_template_kwargs   responseJsonSchema) -> response_format
                      .enable_thinking (thinkingBudget 0: off)

Unknown fields (speechConfig, mediaResolution, responseLogprobs...) are dropped and listed.
"""

from __future__ import annotations

from typing import Any

from gateway.apis.gemini.fields import camel, get, is_int, is_number
from gateway.apis.gemini.schema import json_schema
from gateway.proxy.translation.body import field_error
from gateway.proxy.translation.ignored import Dropped
from gateway.proxy.usage import MAX_TOKENS

_GENERATION = frozenset(
    {
        "maxOutputTokens",
        "temperature",
        "topP",
        "topK",
        "seed",
        "presencePenalty",
        "frequencyPenalty",
        "stopSequences",
        "candidateCount",
        "responseMimeType",
        "responseSchema",
        "responseJsonSchema",
        "thinkingConfig",
        "responseModalities",
    }
)
# generationConfig -> chat: same meaning, another name.
_SAMPLING = (
    ("temperature", "temperature", float),
    ("topP", "top_p", float),
    ("topK", "top_k", int),
    ("seed", "seed", int),
    ("presencePenalty", "presence_penalty", float),
    ("frequencyPenalty", "frequency_penalty", float),
)
MAX_CANDIDATES = 8


def generation(config: Any, chat: dict[str, Any], dropped: Dropped) -> tuple[int | None, int, bool]:
    """(maxOutputTokens, candidateCount, whether reasoning is shown), the rest written to `chat`."""
    if config is None:
        return None, 1, True
    if not isinstance(config, dict):
        raise field_error("generationConfig", "must be an object")
    for name in config:
        if camel(name) not in _GENERATION:
            dropped.add(f"generationConfig.{camel(name)}")
    max_tokens = get(config, "maxOutputTokens")
    if max_tokens is not None:
        if not is_int(max_tokens) or not 1 <= max_tokens <= MAX_TOKENS:
            raise field_error(
                "generationConfig.maxOutputTokens", f"must be an integer from 1 to {MAX_TOKENS}"
            )
        chat["max_tokens"] = max_tokens
    for field, target, kind in _SAMPLING:
        value = get(config, field)
        if value is None:
            continue
        if kind is int and is_number(value) and float(value).is_integer():
            value = int(value)  # topK arrives as 40.0 from some clients
        if not (is_int(value) if kind is int else is_number(value)):
            raise field_error(
                f"generationConfig.{field}", f"must be {'an integer' if kind is int else 'a number'}"
            )
        chat[target] = value
    stops = get(config, "stopSequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
            raise field_error("generationConfig.stopSequences", "must be a list of non-empty strings")
        if stops:
            chat["stop"] = stops
    candidates = get(config, "candidateCount")
    if candidates is None:
        candidates = 1
    if not is_int(candidates) or not 1 <= candidates <= MAX_CANDIDATES:
        raise field_error("generationConfig.candidateCount", f"must be an integer from 1 to {MAX_CANDIDATES}")
    if candidates > 1:
        chat["n"] = candidates
    _json_mode(config, chat, dropped)
    modalities = get(config, "responseModalities")
    if isinstance(modalities, list) and any(m != "TEXT" for m in modalities):
        dropped.add("generationConfig.responseModalities")
    return max_tokens, candidates, _thinking(get(config, "thinkingConfig"), chat)


def _json_mode(config: dict[str, Any], chat: dict[str, Any], dropped: Dropped) -> None:
    mime = get(config, "responseMimeType")
    if mime is None or mime == "text/plain":
        return
    if mime != "application/json":
        dropped.add("generationConfig.responseMimeType")  # text/x.enum: no chat equivalent
        return
    given = get(config, "responseJsonSchema")
    schema = given if isinstance(given, dict) else None
    if schema is None and get(config, "responseSchema") is not None:
        schema = json_schema(get(config, "responseSchema"), "generationConfig.responseSchema")
    if schema is None:
        chat["response_format"] = {"type": "json_object"}
    else:
        chat["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "response", "schema": schema},
        }


def _thinking(thinking: Any, chat: dict[str, Any]) -> bool:
    """Whether the chat template should reason (Qwen3-style `enable_thinking`): a budget of 0
    turns it off, any other budget or level on; the budget itself bounds nothing but the output
    cap. Returns whether thought parts are shown (`includeThoughts`, shown unless false)."""
    if thinking is None:
        return True
    if not isinstance(thinking, dict):
        raise field_error("generationConfig.thinkingConfig", "must be an object")
    budget = get(thinking, "thinkingBudget")
    if budget is not None:
        if not is_int(budget) or budget < -1:
            raise field_error("generationConfig.thinkingConfig.thinkingBudget", "must be an integer from -1")
        chat["chat_template_kwargs"] = {"enable_thinking": budget != 0}
    elif get(thinking, "thinkingLevel") is not None:
        chat["chat_template_kwargs"] = {"enable_thinking": True}
    include = get(thinking, "includeThoughts")
    if include is not None and not isinstance(include, bool):
        raise field_error("generationConfig.thinkingConfig.includeThoughts", "must be a boolean")
    return include is not False
