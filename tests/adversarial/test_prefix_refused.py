"""The prefix index fed with prompts the worker refuses: each refused request would add its prompt's
blocks (billed nothing), crowding out the prefixes real traffic built. A prefix is recorded only
once the worker accepted the request.

A real gateway routing by prefix_affinity in front of the fake worker, which refuses a request
when told to (`x-fake-status`); the index's size is read from its gauge."""

from __future__ import annotations

import secrets

from gateway.model_table import ModelConfig, ModelTable, RoutingConfig
from tests.conftest import FAKE_MODEL, GatewayFactory
from tests.http import post
from tests.routing.conftest import metric

PROMPT_BYTES = 8 * 512  # eight whole blocks at the default block size


def _ask(gw_url: str, key: str, status: str | None = None) -> int:
    body = {
        "model": FAKE_MODEL,
        "messages": [{"role": "user", "content": secrets.token_hex(PROMPT_BYTES // 2)}],
    }
    headers = {"x-fake-status": status} if status else None
    return post(f"{gw_url}/v1/chat/completions", body, key=key, headers=headers).status


def test_prompts_the_worker_refuses_do_not_fill_the_prefix_index(
    make_gateway: GatewayFactory, fake_worker: str
) -> None:
    routing = RoutingConfig(policy="prefix_affinity")
    table = ModelTable((ModelConfig(name=FAKE_MODEL, endpoints=(fake_worker,), routing=routing),))
    with make_gateway(table) as gw:
        key = gw.new_key()["key"]
        for _ in range(5):
            assert _ask(gw.url, key, status="400") == 400
        assert metric(gw, "sluicegate_prefix_index_blocks") == 0
        # An accepted one is recorded, so the index is in use here.
        assert _ask(gw.url, key) == 200
        assert metric(gw, "sluicegate_prefix_index_blocks") >= 8
