"""A request body -> what to generate and how to answer; every 400 and 404 is decided here.

Ignored, as Reframr's own adapter ignores them: `logprobs`, `response_format`, `seed`, `user`,
`presence_penalty` / `frequency_penalty` (Reframr has `repetition_penalty` instead).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from workers.common.errors import RequestError, bad_request
from workers.reframr.context import completion_context, compose_chat_context
from workers.reframr.engine import DEFAULT_MAX_TOKENS, REASONING_MODES, Job, Sampling
from workers.reframr.tools import callable_tools

_DEFAULTS = Sampling()


@dataclass(frozen=True, slots=True)
class Order:
    """A validated request."""

    chat: bool
    model: str
    job: Job
    stream: bool
    include_usage: bool
    continuous_usage: bool
    """Usage on every chunk too (`stream_options.continuous_usage_stats`, with include_usage)."""
    stops: tuple[str, ...]
    tools: frozenset[str] | None
    """Tool names the answer may call; None when tool calls are off."""
    max_tokens_given: bool


def _number(body: Mapping[str, Any], field: str, default: float, low: float, high: float | None) -> float:
    value = body.get(field)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value < low:
        raise bad_request(f"{field} must be a number >= {low}", field)
    if high is not None and value > high:
        raise bad_request(f"{field} must be a number <= {high}", field)
    return float(value)


def _int(body: Mapping[str, Any], field: str, low: int) -> int | None:
    value = body.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise bad_request(f"{field} must be an integer >= {low}", field)
    return value


def _max_tokens(body: Mapping[str, Any]) -> int | None:
    # The newer name wins when both are given, as in vLLM.
    for field in ("max_completion_tokens", "max_tokens"):
        value = _int(body, field, 1)
        if value is not None:
            return value
    return None


def _stops(body: Mapping[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,)
    if isinstance(stop, list) and all(isinstance(item, str) for item in stop):
        return tuple(stop)
    raise bad_request("stop must be a string or a list of strings", "stop")


def _reasoning_mode(body: Mapping[str, Any]) -> str | None:
    mode = body.get("reasoning_mode")
    if mode is None or mode in REASONING_MODES:
        return mode if isinstance(mode, str) else None
    raise bad_request(f"reasoning_mode must be one of {', '.join(REASONING_MODES)}", "reasoning_mode")


def _sampling(body: Mapping[str, Any]) -> Sampling:
    top_k = _int(body, "top_k", 0)
    return Sampling(
        temperature=_number(body, "temperature", _DEFAULTS.temperature, 0.0, None),
        top_k=_DEFAULTS.top_k if top_k is None else top_k,
        top_p=_number(body, "top_p", _DEFAULTS.top_p, 0.0, 1.0),
        repetition_penalty=_number(body, "repetition_penalty", _DEFAULTS.repetition_penalty, 0.0, None),
    )


def parse_order(raw: bytes, model_name: str, *, chat: bool) -> Order:
    """Raises RequestError: 400 for a bad body or field, 404 for another model."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    model = body.get("model", model_name)
    if not isinstance(model, str):
        raise bad_request("model must be a string", "model")
    if model != model_name:
        raise RequestError(404, f"The model `{model}` does not exist.", "model")
    if body.get("n") not in (None, 1):
        raise bad_request("this worker generates one choice per request (n must be 1)", "n")
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise bad_request("stream must be a boolean", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_request("stream_options must be an object", "stream_options")
    options = options or {}
    context = compose_chat_context(body.get("messages")) if chat else completion_context(body.get("prompt"))
    max_tokens = _max_tokens(body)
    job = Job(context, max_tokens or DEFAULT_MAX_TOKENS, _reasoning_mode(body), _sampling(body))
    include_usage = stream and options.get("include_usage") is True
    return Order(
        chat=chat,
        model=model,
        job=job,
        stream=stream,
        include_usage=include_usage,
        # As in vLLM, continuous_usage_stats counts only together with include_usage.
        continuous_usage=include_usage and options.get("continuous_usage_stats") is True,
        stops=_stops(body),
        tools=callable_tools(body) if chat else None,
        max_tokens_given=max_tokens is not None,
    )


def fit_context(order: Order, prompt_tokens: int, max_model_len: int | None) -> Order:
    """Check the request against a configured `max_model_len`, as vLLM does: a 400 when the prompt
    leaves no room or an explicit max_tokens does not fit; a default max_tokens shrinks to fit.

    Reframr's recurrent memory has no window of its own; the limit is the operator's guard against
    one request holding the only engine slot for long.
    """
    if max_model_len is None:
        return order
    room = max_model_len - prompt_tokens
    if room < 1:
        message = f"the prompt has {prompt_tokens} tokens; this model's max_model_len is {max_model_len}"
        raise bad_request(message, "messages" if order.chat else "prompt")
    if order.job.max_tokens <= room:
        return order
    if order.max_tokens_given:
        message = (
            f"max_tokens={order.job.max_tokens} cannot be greater than max_model_len={max_model_len} "
            f"minus the prompt's {prompt_tokens} tokens"
        )
        raise bad_request(message, "max_tokens")
    return replace(order, job=replace(order.job, max_tokens=room))
