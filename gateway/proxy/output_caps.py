"""The output cap of a request before admission (gateway/limits/output.py has the rules): the
default where the client set none, the model's `max_output_tokens`, and its context window less
the prompt. The worker's own prompt count is asked for only where the model has `tokenize: true`
and the estimate puts the cap near the window, so the common request makes no extra call.
"""

from __future__ import annotations

import orjson

from gateway.limits.output import (
    OutputCap,
    estimated_prompt_bound,
    near_window,
    static_cap,
    within_window,
)
from gateway.proxy.dialect import Call
from gateway.proxy.prompt_count import tokenize_body, worker_prompt_tokens
from gateway.proxy.upstream import Upstream
from gateway.proxy.worker_protocols import CHAT
from gateway.routing.router import ModelRoute


def context_window(route: ModelRoute) -> int | None:
    """The model's `context_window`, else the smallest `max_model_len` its workers report."""
    if route.model.context_window is not None:
        return route.model.context_window
    reported = (
        e.max_model_len
        for pool in route.pools
        for e in pool.endpoints
        if e.max_model_len is not None and not e.removed
    )
    return min(reported, default=None)


class OutputCaps:
    def __init__(self, upstream: Upstream, default_max_tokens: int) -> None:
        self._upstream = upstream
        self._default_max_tokens = default_max_tokens

    async def before_admission(self, call: Call, route: ModelRoute, history: int = 0) -> OutputCap:
        """`history`: the tokens of the stored conversation the call continues (the worker's own
        count), which take their part of the window before the call's prompt."""
        model = route.model
        cap = static_cap(
            call.asked_output(),
            self._default_max_tokens,
            model_default=model.default_max_tokens,
            max_output_tokens=model.max_output_tokens,
        )
        window = context_window(route)
        if window is not None:
            window -= history
        estimate = call.estimated_prompt_tokens()
        if window is None or not near_window(cap, estimate, window):
            return cap
        counted = None
        if model.tokenize and call.protocol is CHAT:
            # /tokenize takes the chat contract's body: a natively served API's is not one.
            counted = await worker_prompt_tokens(
                self._upstream,
                route,
                lambda pool: tokenize_body(
                    orjson.loads(
                        call.worker_body(
                            pool.wire_model, continuous_usage=False, max_tokens=None, cache_salt=None
                        )
                    ),
                    pool.wire_model,
                ),
            )
        return within_window(cap, estimated_prompt_bound(estimate) if counted is None else counted, window)
