"""A model's engine allow-list and logprob cap (docs/api.md, Engine fields) reach the gateway's
model file from the chart's values, checked by the schema as check-config checks them."""

from __future__ import annotations

from typing import Any

import yaml

from gateway.model_file import parse_model_table
from tests.chart.cases import CASES
from tests.chart.conftest import Renderer, rendered


def _model(**fields: Any) -> dict[str, Any]:
    return {"name": "m", "engine": "external", "external": {"url": "http://w:8000"}, **fields}


def test_engine_fields_and_max_logprobs_reach_the_model_file(render: Renderer) -> None:
    values = {"models": [_model(engine_fields=["min_p", "guided_json"], max_logprobs=0)]}
    result = rendered(render, *CASES["gpu-cluster"][0], values=values)
    config = next(c for c in result.of_kind("ConfigMap") if "models.yaml" in c["data"])
    table = yaml.safe_load(config["data"]["models.yaml"])
    entry = next(e for e in table["models"] if e["name"] == "m")
    assert (entry["engine_fields"], entry["max_logprobs"]) == (["min_p", "guided_json"], 0)
    model = next(m for m in parse_model_table(table).models if m.name == "m")
    assert (model.engine_fields, model.max_logprobs) == (frozenset({"min_p", "guided_json"}), 0)


def test_the_schema_refuses_what_check_config_refuses(render: Renderer) -> None:
    for bad in ({"engine_fields": ["request_id"]}, {"engine_fields": ["Min P"]}, {"max_logprobs": -1}):
        assert render(*CASES["gpu-cluster"][0], values={"models": [_model(**bad)]}).error, bad
