from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.cli import main
from gateway.config import Settings
from gateway.errors import ConfigError
from gateway.model_file import load_model_table, parse_model_table

GOOD = {
    "models": [
        {
            "name": "llama-3-8b",
            "aliases": ["default"],
            "upstream_model": "meta-llama/Meta-Llama-3-8B-Instruct",
            "endpoints": [{"url": "http://10.0.0.5:8000"}, {"url": "http://10.0.0.6:8000/"}],
            "timeouts": {"connect": 2, "first_token": 60, "idle": 30},
        }
    ]
}


def test_the_documented_table_parses() -> None:
    table = parse_model_table(GOOD)
    (model,) = table.models
    assert model.endpoints == ("http://10.0.0.5:8000", "http://10.0.0.6:8000")
    assert model.wire_model == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert model.timeouts.first_token == 60
    assert table.by_name()["default"] is model


def test_discovery_pools_fallbacks_routing_and_health_parse() -> None:
    doc = {
        "models": [
            {
                "name": "llama",
                "discovery": {"kubernetes": {"namespace": "llm", "service": "llama-3", "port": 8000}},
                "fallbacks": ["small"],
                "routing": {
                    "policy": "session_affinity",
                    "max_inflight_per_endpoint": 8,
                    "max_queue_wait": 5,
                },
                "health": {"failures_to_eject": 2, "probe_interval": 1},
            },
            {
                "name": "small",
                "pools": [
                    {"name": "stable", "weight": 90, "endpoints": [{"url": "http://a:1"}]},
                    {
                        "name": "canary",
                        "weight": 10,
                        "upstream_model": "small-v2",
                        "discovery": {"kubernetes": {"service": "small-canary"}},
                    },
                ],
            },
        ]
    }
    llama, small = parse_model_table(doc).models
    (pool,) = llama.pool_configs()
    assert pool.name == "llama"
    assert pool.kubernetes is not None
    assert (pool.kubernetes.namespace, pool.kubernetes.service, pool.kubernetes.port) == (
        "llm",
        "llama-3",
        8000,
    )
    assert (llama.fallbacks, llama.routing.policy, llama.routing.max_inflight_per_endpoint) == (
        ("small",),
        "session_affinity",
        8,
    )
    assert (llama.health.failures_to_eject, llama.health.probe_interval) == (2, 1.0)
    stable, canary = small.pool_configs()
    assert (stable.name, stable.weight, stable.endpoints) == ("small/stable", 90.0, ("http://a:1",))
    assert canary.kubernetes is not None
    assert (canary.upstream_model, canary.kubernetes.namespace, canary.kubernetes.port) == (
        "small-v2",
        None,
        "http",
    )


def _with(path: str, value: Any) -> dict[str, Any]:
    import copy

    doc = copy.deepcopy(GOOD)
    target: Any = doc["models"][0]
    *parents, leaf = path.split(".")
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    target[leaf] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        (_with("endpoints", []), "models[0].endpoints"),
        (_with("endpoints.1.url", "ftp://x"), "models[0].endpoints[1].url"),
        (_with("endpoints.0.url", "http://w:8000/v1"), "models[0].endpoints[0].url"),
        (_with("timeouts.idle", -1), "models[0].timeouts.idle"),
        (_with("timeouts.idle", "soon"), "models[0].timeouts.idle"),
        (_with("timeouts.forever", 1), "models[0].timeouts.forever"),
        (_with("aliases", ["ok", "bad name"]), "models[0].aliases[1]"),
        (_with("name", None), "models[0].name"),
        (_with("endpoints_typo", []), "models[0].endpoints_typo"),
        ({"models": [GOOD["models"][0], {**GOOD["models"][0], "aliases": []}]}, "models[1].name"),
        ({"modles": []}, "modles"),
        (_with("routing", {"policy": "fastest"}), "models[0].routing.policy"),
        (_with("routing", {"max_queue_wait": 0}), "models[0].routing.max_queue_wait"),
        (_with("health", {"failures_to_eject": 1.5}), "models[0].health.failures_to_eject"),
        (_with("fallbacks", ["nope"]), "models[0].fallbacks[0]"),
        (_with("fallbacks", ["default"]), "models[0].fallbacks[0]"),  # its own alias
        (_with("discovery", {"kubernetes": {"service": "s"}}), "models[0].endpoints"),  # and endpoints
        (
            {
                "models": [
                    {
                        "name": "m",
                        "pools": [{"name": "a", "weight": -1, "endpoints": [{"url": "http://a:1"}]}],
                    }
                ]
            },
            "models[0].pools[0].weight",
        ),
    ],
)
def test_a_bad_field_is_named(doc: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_model_table(doc)
    assert str(err.value).startswith(named + ":"), str(err.value)


def test_check_config_names_the_bad_field_and_exits_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - name: m\n    endpoints:\n      - url: nope\n")
    assert main(["check-config", str(path)]) == 2
    assert "models[0].endpoints[0].url" in capsys.readouterr().err
    path.write_text("models:\n  - name: m\n    endpoints:\n      - url: http://127.0.0.1:9\n")
    assert main(["check-config", str(path)]) == 0
    assert "1 model(s): m" in capsys.readouterr().out


def test_invalid_yaml_and_missing_file_are_config_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("models: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_model_table(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_model_table(tmp_path / "missing.yaml")


def test_settings_from_env() -> None:
    settings = Settings.from_env(
        {
            "SLUICEGATE_REDIS_URL": "rediss://r:6380/1",
            "SLUICEGATE_PORT": "9000",
            "SLUICEGATE_ADMIN_TOKEN": "t" * 32,
        }
    )
    assert (settings.redis_url, settings.port, settings.admin_token) == ("rediss://r:6380/1", 9000, "t" * 32)
    assert Settings.from_env({}).port == 8080
    with pytest.raises(ConfigError, match="SLUICEGATE_PORT"):
        Settings.from_env({"SLUICEGATE_PORT": "eighty"})
    with pytest.raises(ConfigError, match="SLUICEGATE_REDIS_URL"):
        Settings.from_env({"SLUICEGATE_REDIS_URL": "http://r"})


def test_continuous_usage_is_on_unless_a_model_turns_it_off() -> None:
    table = parse_model_table(
        {
            "models": [
                {"name": "a", "endpoints": [{"url": "http://10.0.0.1:8000"}]},
                {"name": "b", "endpoints": [{"url": "http://10.0.0.2:8000"}], "continuous_usage": False},
            ]
        }
    )
    assert [m.continuous_usage for m in table.models] == [True, False]
    with pytest.raises(ConfigError, match=r"continuous_usage: must be true or false"):
        parse_model_table(
            {"models": [{"name": "a", "endpoints": [{"url": "http://x:1"}], "continuous_usage": "no"}]}
        )


def test_engine_fields_and_the_logprob_cap_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def model(extra: str) -> str:
        return f"models:\n  - name: m\n    endpoints:\n      - url: http://127.0.0.1:9\n{extra}"

    path = tmp_path / "models.yaml"
    for extra, named in [
        ("    engine_fields: [min_p, request_id]\n", "models[0].engine_fields[1]"),
        ("    engine_fields: min_p\n", "models[0].engine_fields"),
        ("    engine_fields: ['Min P']\n", "models[0].engine_fields[0]"),
        ("    max_logprobs: -1\n", "models[0].max_logprobs"),
        ("    max_logprobs: 2.5\n", "models[0].max_logprobs"),
    ]:
        path.write_text(model(extra))
        assert main(["check-config", str(path)]) == 2, extra
        assert named + ":" in capsys.readouterr().err
    path.write_text(model("    engine_fields: [min_p, guided_json]\n    max_logprobs: 20\n"))
    assert main(["check-config", str(path)]) == 0
    parsed = parse_model_table(yaml.safe_load(model("    engine_fields: [min_p]\n"))).models[0]
    assert (parsed.engine_fields, parsed.max_logprobs) == (frozenset({"min_p"}), 5)
