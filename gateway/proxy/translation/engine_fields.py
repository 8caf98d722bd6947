"""Which of an OpenAI body's fields reach the worker: an allow-list, not a pass-through.

vLLM takes dozens of fields beyond OpenAI's (`chat_template`, `logits_processors`, `vllm_xargs`,
`prompt_logprobs`, `min_tokens`, `allowed_token_ids`...), and a future release adds more. Their
effect depends on the worker's flags: some let one client choose costly engine-side work in a
server every team shares. So the worker gets:

    the OpenAI API's own fields for the path (the worker contract speaks that API:
    workers/CONTRACT.md), the contract's one engine extra (`ignore_eos`), the gateway's own
    `cache_salt`, and what the model's file admits by name (`engine_fields: [min_p, guided_json]`)

Any other field is dropped and named (x-sluicegate-ignored, sluicegate_ignored_fields_total),
unless dropping it would change what the answer means (a constrained output, another chat
template, the prompt's logprobs the client asked for): that is a 400 naming it. Logprob counts
are capped (`max_logprobs`, default 5; the model may raise it): each one is engine work and
answer bytes for every generated token.
"""

from __future__ import annotations

from typing import Any, Self

from gateway.errors import GatewayError
from gateway.model_table import ModelConfig
from gateway.proxy.engine_ids import ENGINE_ID_FIELDS
from gateway.proxy.translation.body import field_error

# OpenAI's own request fields (its API reference, chat and legacy completions, embeddings).
_COMMON = frozenset({"model", "user", "stream", "stream_options", "n", "seed", "stop", "max_tokens"})
_SAMPLING = frozenset(
    {"temperature", "top_p", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs"}
)
CHAT_FIELDS = (
    _COMMON
    | _SAMPLING
    | {
        "messages",
        "max_completion_tokens",
        "top_logprobs",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "functions",
        "function_call",
        "response_format",
        "reasoning_effort",
        "metadata",
        "store",
        "service_tier",
        "modalities",
        "audio",
        "prediction",
        "web_search_options",
        "verbosity",
        "prompt_cache_key",
        "safety_identifier",
    }
)
COMPLETIONS_FIELDS = _COMMON | _SAMPLING | {"prompt", "suffix", "echo", "best_of"}
EMBEDDINGS_FIELDS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})
# The contract's one engine extra (its conformance suite sends it) and the gateway's own salt
# (replaced by the one it derives: gateway.proxy.cache_salt).
CONTRACT_EXTRAS = frozenset({"ignore_eos", "cache_salt"})
FIELDS = {
    "/v1/chat/completions": CHAT_FIELDS | CONTRACT_EXTRAS,
    "/v1/completions": COMPLETIONS_FIELDS | CONTRACT_EXTRAS,
    "/v1/embeddings": EMBEDDINGS_FIELDS | CONTRACT_EXTRAS,
}
# Engine fields whose loss would change what the answer means: refused with a 400 naming them
# unless the model admits them. The output's form (guided decoding, token bans), the prompt itself
# (another template, documents, continuing the last message), data the client asked to get back.
MEANING_FIELDS = frozenset(
    {
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
        "guided_decoding_backend",
        "guided_whitespace_pattern",
        "structured_outputs",
        "allowed_token_ids",
        "bad_words",
        "logits_processors",
        "chat_template",
        "chat_template_kwargs",
        "documents",
        "add_generation_prompt",
        "continue_final_message",
        "echo",
        "prompt_logprobs",
        "return_tokens_as_token_ids",
        "return_token_ids",
    }
)
# vLLM's other sampling and engine extras, named here only so the counter can label them (a
# client-chosen name never becomes a label): dropped when not admitted.
DROPPED_FIELDS = frozenset(
    {
        "top_k",
        "min_p",
        "min_tokens",
        "repetition_penalty",
        "length_penalty",
        "use_beam_search",
        "include_stop_str_in_output",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "truncate_prompt_tokens",
        "stop_token_ids",
        "mm_processor_kwargs",
        "vllm_xargs",
        "add_special_tokens",
        "media_io_kwargs",
        "thinking_token_budget",
        *ENGINE_ID_FIELDS,
    }
)
# The count fields, capped per model. Chat's `logprobs` is a boolean (its count is `top_logprobs`);
# completions' is the count. vLLM reads -1 as "the whole vocabulary", so the floor is 0.
_COUNTS = ("top_logprobs", "prompt_logprobs")


def check_logprobs(payload: dict[str, Any], cap: int, counted_logprobs: bool) -> None:
    """A 400 naming the first logprob count outside 0..cap. `counted_logprobs`: `logprobs` is a
    count on this path (completions), not chat's boolean."""
    names = (*_COUNTS, "logprobs") if counted_logprobs else _COUNTS
    for name in names:
        value = payload.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= cap:
            raise field_error(name, f"must be an integer from 0 to {cap} (this model's max_logprobs)")


def held(payload: dict[str, Any], extra: set[str]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """`payload` without the fields in `extra` (those neither allowed nor admitted), and their
    names, sorted; a 400 naming the first whose loss would change the answer's meaning."""
    refused = sorted(extra & MEANING_FIELDS)
    if refused:
        raise _refusal(refused[0])
    kept = {name: value for name, value in payload.items() if name not in extra}
    return kept, tuple(sorted(extra))


def _refusal(name: str) -> GatewayError:
    return field_error(
        name,
        "is an engine field this model's workers are not sent (its model file does not list it "
        "under engine_fields), and serving the request without it would change the answer",
    )


class HeldElsewhere:
    """`held_to` for a call whose worker body is not the client's OpenAI body: a translation writes
    its chat body itself, field by field (what it does not know is dropped and named there); a
    native Messages or Responses body is held by that API's own fields at the worker."""

    __slots__ = ()

    def held_to(self, model: ModelConfig) -> Self:
        return self
