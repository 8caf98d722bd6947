"""A worker body's `priority`, which only the gateway sets.

vLLM started with `--scheduling-policy priority` orders its waiting queue by (priority, arrival),
smaller first; every request a client sends has the default 0. A background (batch) request to a
model whose file says `engine_priority: true` gets BATCH_PRIORITY, so interactive requests waiting
in the engine beside batch lines are started first. Running lines are not stopped for them: vLLM
preempts a running request only when KV-cache blocks run out, and then the one with the largest
priority (a batch line) first.

Interactive requests never carry the field (vLLM's default applies), and a model without the
setting never gets it: vLLM answers 400 to a non-zero priority on a server without the policy. A
client's own `priority` never reaches a worker either way (gateway/proxy/engine_ids.py drops it
from interactive bodies; here it is replaced or dropped from a batch line's).
"""

from __future__ import annotations

from typing import Any

from gateway.model_table import ModelConfig

FIELD = "priority"
# Positive: behind interactive requests (0). Not 1, so that classes between the two can be added
# without renumbering the batch's.
BATCH_PRIORITY = 10


def with_engine_priority(body: dict[str, Any], model: ModelConfig, *, background: bool) -> dict[str, Any]:
    """The worker body for `body`: with `priority` set to BATCH_PRIORITY when the request is a
    background one and its model has engine_priority (a copy), without any `priority` otherwise
    (`body` itself when it has none)."""
    if background and model.engine_priority:
        return {**body, FIELD: BATCH_PRIORITY}
    if FIELD not in body:
        return body
    return {name: value for name, value in body.items() if name != FIELD}
