"""A parsed call, held to its model's translation settings (gateway.model_table):

    engine_fields: [...]     an OpenAI body's fields beyond the API's own that reach the workers
                             (gateway.proxy.translation.engine_fields), and `max_logprobs`
    native_normalise: true   a native pool's body gets the translation's normalisation, the one
                             place a native body is rewritten beyond what native.py lists (the
                             model name, the output cap): Messages' later system messages folded
                             into the adjacent user turn (chat_shape.fold_messages); Responses'
                             namespace tools flattened and hosted tools dropped (tool_names), the
                             flat names mapped back in the worker's answers and events
    hosted_tools: refuse     a tool the worker cannot run is a 400 naming it, instead of dropped

Applied once, after the model is resolved and before admission, so the reservation is made from
the body the worker gets.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, TypeVar

from gateway.errors import ErrorCode, GatewayError
from gateway.model_table import ModelConfig
from gateway.proxy import worker_protocols
from gateway.proxy.dialect import Call
from gateway.proxy.translation import chat_shape
from gateway.proxy.translation.ignored import IGNORED_HEADER, Dropped, header_value, hosted_tools
from gateway.proxy.translation.native import NativeCall, text_chars
from gateway.proxy.translation.tool_names import ToolNames, flatten, input_call

CallT = TypeVar("CallT", bound=Call)


def apply(call: CallT, model: ModelConfig) -> CallT:
    call = call.held_to(model)
    if isinstance(call, NativeCall) and model.native_normalise:
        call = normalised(call)  # type: ignore[assignment]
    hosted = hosted_tools(call.ignored) if call.ignored else None
    if hosted and model.hosted_tools == "refuse":
        where, _, kind = hosted[0].partition(":")
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            f"'{where}' is a '{kind}' tool, which this model's workers cannot run; the model is "
            "configured to refuse such requests (hosted_tools: refuse) rather than drop the tool.",
            param=f"{where}.type",
            headers={IGNORED_HEADER: header_value(call.ignored)},
        )
    return call


def normalised(call: NativeCall) -> NativeCall:
    names: ToolNames | None = None
    ignored: tuple[str, ...] = ()
    if call.protocol is worker_protocols.MESSAGES:
        body, changed = chat_shape.fold_messages(call.body)
        if not changed:
            return call
    elif call.protocol is worker_protocols.RESPONSES:
        body, names, ignored = responses_body(call.body)
    else:
        return call
    estimate = max(1, math.ceil(text_chars(body) / 4))
    return dataclasses.replace(call, body=body, prompt_estimate=estimate, names=names, ignored=ignored)


def responses_body(body: dict[str, Any]) -> tuple[dict[str, Any], ToolNames, tuple[str, ...]]:
    """A Responses body with flat tools, and the input's namespaced calls under their flat names."""
    dropped = Dropped()
    tools, names = flatten(body.get("tools"), dropped)
    out = dict(body)
    if tools is not None:
        out["tools"] = tools
    items = body.get("input")
    if isinstance(items, list):
        out["input"] = [input_call(item, names) if isinstance(item, dict) else item for item in items]
    return out, names, dropped.done()
