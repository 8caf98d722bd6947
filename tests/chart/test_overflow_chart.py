"""A model's overflow providers reach the gateway's model file from the chart's values, with their
key and CA Secrets mounted where the model file reads them; the schema refuses what check-config
refuses."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import yaml

from gateway.model_file import parse_model_table
from tests.chart.cases import CASES
from tests.chart.conftest import Renderer, containers, rendered

PROVIDER: dict[str, Any] = {
    "name": "cloud",
    "url": "https://api.provider.example/v1",
    "model": "provider-model",
    "keySecret": {"name": "cloud-key", "key": "api-key"},
    "caSecret": {"name": "cloud-ca", "key": "ca.pem"},
    "price": {"input_per_million": "3.00", "output_per_million": "15.00"},
}


def _model(**provider: Any) -> dict[str, Any]:
    return {
        "name": "m",
        "engine": "external",
        "external": {"url": "http://w:8000"},
        "price": {"input_per_million": "0.20", "output_per_million": "0.80"},
        "overflow": {"after_ms": 3000, "max_concurrency": 32, "providers": [{**PROVIDER, **provider}]},
    }


def test_providers_and_their_secrets_reach_the_gateway(render: Renderer) -> None:
    result = rendered(render, *CASES["gpu-cluster"][0], values={"models": [_model()]})
    config = next(c for c in result.of_kind("ConfigMap") if "models.yaml" in c["data"])
    table = parse_model_table(yaml.safe_load(config["data"]["models.yaml"]))
    overflow = next(m for m in table.models if m.name == "m").overflow
    assert overflow is not None
    (provider,) = overflow.providers
    assert (provider.url, provider.model, provider.key_env) == (PROVIDER["url"], "provider-model", None)
    assert provider.key_file is not None
    assert provider.ca_file is not None
    gateway = next(
        o
        for o in result.objects
        if o["kind"] in ("Deployment", "StatefulSet") and any(c["name"] == "gateway" for c in containers(o))
    )
    volumes = {v["name"]: v for v in gateway["spec"]["template"]["spec"]["volumes"]}
    (container,) = [c for c in containers(gateway) if c["name"] == "gateway"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for path, secret in ((provider.key_file, "cloud-key"), (provider.ca_file, "cloud-ca")):
        mount = mounts[str(PurePosixPath(path).parent)]
        assert mount["readOnly"] is True
        assert volumes[mount["name"]]["secret"]["secretName"] == secret


def test_the_schema_refuses_what_check_config_refuses(render: Renderer) -> None:
    no_key = _model()
    del no_key["overflow"]["providers"][0]["keySecret"]
    for values in (
        {"models": [_model(url="http://api.provider.example/v1")]},
        {"models": [no_key]},
        {"models": [_model(price={"input_per_million": "abc", "output_per_million": "1"})]},
        {"models": [_model(verify=False)]},
    ):
        assert render(*CASES["gpu-cluster"][0], values=values).error, values
