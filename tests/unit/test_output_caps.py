"""The output cap's static steps (gateway/limits/output.py), the model table's settings for them,
and the context a worker reports in GET /v1/models."""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import ConfigError
from gateway.limits.output import (
    LIMITED_BY_HEADER,
    MAX_TOKENS_HEADER,
    NO_OUTPUT,
    AskedOutput,
    LimitedBy,
    estimated_prompt_bound,
    near_window,
    static_cap,
    within_window,
)
from gateway.model_file import parse_model_table
from gateway.routing.monitor import _max_model_len


def test_each_step_only_lowers_the_cap_and_the_last_names_the_reason() -> None:
    asked = static_cap(AskedOutput(32_000), 1024, max_output_tokens=8192)
    assert (asked.per_answer, asked.limited_by) == (8192, LimitedBy.MAX_OUTPUT_TOKENS)
    assert asked.headers() == {MAX_TOKENS_HEADER: "8192", LIMITED_BY_HEADER: "max_output_tokens"}
    unset = static_cap(AskedOutput(None), 1024, model_default=300)
    assert (unset.per_answer, unset.limited_by) == (300, LimitedBy.DEFAULT)
    assert static_cap(AskedOutput(None), 1024).per_answer == 1024
    small = static_cap(AskedOutput(100), 1024, max_output_tokens=8192)
    assert (small.per_answer, small.headers()) == (100, {})  # as asked: nothing to tell
    assert static_cap(NO_OUTPUT, 1024).reservation(7).completion_tokens == 0


def test_the_context_clamp_keeps_the_least_output_and_is_looked_at_only_near_the_window() -> None:
    cap = static_cap(AskedOutput(32_000), 1024)
    assert near_window(cap, 19_000, 131_072) is False  # the common path: no count needed
    assert near_window(cap, 19_000, 32_768) is True
    bounded = within_window(cap, estimated_prompt_bound(19_000), 32_768)
    assert bounded.per_answer == 32_768 - (23_750 + 64)
    assert bounded.limited_by is LimitedBy.CONTEXT_WINDOW
    # A prompt past the window: the least output, and the worker's own refusal.
    assert within_window(cap, 40_000, 32_768).per_answer == 16


def test_n_answers_reserve_one_cap_each_and_least_output_per_answer() -> None:
    cap = static_cap(AskedOutput(100, answers=8), 1024)
    assert cap.reservation(5).completion_tokens == 800
    assert cap.least == 16 * 8


def _table(**fields: object) -> dict[str, object]:
    return {"models": [{"name": "m", "endpoints": [{"url": "http://w:8000"}], **fields}]}


def test_the_model_table_takes_the_output_settings_as_whole_positive_numbers() -> None:
    model = parse_model_table(
        _table(max_output_tokens=8192, context_window=32768, default_max_tokens=2048)
    ).models[0]
    assert (model.max_output_tokens, model.context_window, model.default_max_tokens) == (8192, 32768, 2048)
    plain = parse_model_table(_table()).models[0]
    assert (plain.max_output_tokens, plain.context_window, plain.default_max_tokens) == (None, None, None)
    for bad in (0, -1, 1.5, "4096", True, 2**31):
        with pytest.raises(ConfigError, match=r"models\[0\]\.context_window"):
            parse_model_table(_table(context_window=bad))


def test_max_model_len_is_read_for_the_pools_model_only() -> None:
    body = orjson.dumps(
        {
            "data": [
                {"id": "other", "max_model_len": 4096},
                {"id": "m", "max_model_len": 16384},
                {"id": "n", "max_model_len": "big"},
            ]
        }
    )
    assert _max_model_len(body, "m") == 16384
    assert _max_model_len(body, "n") is None
    assert _max_model_len(body, "absent") is None
    assert _max_model_len(b"not json", "m") is None
