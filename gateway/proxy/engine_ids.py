"""Body fields that name things inside the engine, which a client must not choose.

vLLM takes a client's `request_id` as its own id for the request, and its Responses store keys
stored responses by it: one team sending another team's id would overwrite or read that team's
response. `kv_transfer_params` names another request's KV blocks (disaggregated prefill). Neither
reaches a worker from a client: the engine picks its own ids (the gateway's request id already
travels in `x-request-id`). Nor does `priority`: under vLLM's priority scheduling it would let a
client jump the engine's queue past the gateway's fair share and priority bands."""

from __future__ import annotations

from typing import Any

ENGINE_ID_FIELDS = frozenset({"request_id", "kv_transfer_params", "priority"})


def names_engine_ids(payload: dict[str, Any]) -> bool:
    return not ENGINE_ID_FIELDS.isdisjoint(payload)


def without_engine_ids(payload: dict[str, Any]) -> dict[str, Any]:
    """`payload` itself when it names none, else a copy without them."""
    if not names_engine_ids(payload):
        return payload
    return {name: value for name, value in payload.items() if name not in ENGINE_ID_FIELDS}
